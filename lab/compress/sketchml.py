"""SketchML: quantile buckets, a MinMaxSketch of bucket indices, delta-binary keys.

Jiang, Fu, Yang, Cui, "SketchML: Accelerating Distributed Machine Learning with Data Sketches",
SIGMOD 2018 (Sec. 3-4). A sparse gradient is a list of (key, value) pairs; positive and
negative values are encoded separately, each group as:

1. quantile buckets: the magnitudes are split into ``buckets`` equally populated buckets
   (Sec. 3.2; exact quantiles here, where the paper streams them through a quantile sketch),
   each represented by its mean; a value becomes its bucket index (one byte).
2. MinMaxSketch (Sec. 3.3): a ``rows`` x ``width`` table of indices; inserting a key keeps the
   *minimum* of the indices hashed to a cell, a query takes the *maximum* over rows. A
   collision can only lower an index, so a decoded magnitude never exceeds the bucket of the
   true one (the paper's argument that the error does not make SGD diverge).
3. delta-binary keys (Sec. 3.4): sorted keys are sent as differences, each in 1 to 4 bytes,
   with a 2-bit length flag per key.

``density`` (optional) first keeps the largest entries, for dense gradients (then biased: wrap
it with ``ef``); by default every nonzero entry is a key. ``width`` defaults to the number of
keys of the group. Hashes come from a seed all ranks share, so any rank decodes any payload.
"""
from __future__ import annotations

import torch

from .base import Compressor, check_int, register
from .countsketch import random_hash
from .packing import pack_uint, unpack_uint
from .topk import check_density, resolve_k, topk_indices

EMPTY = 255  # an unused MinMaxSketch cell (above every index)


def delta_encode(keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sorted int64 ``keys`` -> (2-bit length flags packed, delta bytes little endian)."""
    deltas = torch.diff(keys, prepend=keys.new_zeros(1))
    nbytes = 1 + (deltas >= 1 << 8).long() + (deltas >= 1 << 16).long() + (deltas >= 1 << 24).long()
    shifts = torch.arange(4) * 8
    table = (deltas.unsqueeze(1) >> shifts) & 0xFF  # (n, 4) bytes
    used = torch.arange(4) < nbytes.unsqueeze(1)
    return pack_uint((nbytes - 1).to(torch.uint8), 2), table[used].to(torch.uint8)


def delta_decode(flags: torch.Tensor, data: torch.Tensor, count: int) -> torch.Tensor:
    nbytes = unpack_uint(flags, count, 2).long() + 1
    start = torch.cumsum(nbytes, 0) - nbytes
    pos = start.unsqueeze(1) + torch.arange(4)
    used = torch.arange(4) < nbytes.unsqueeze(1)
    padded = torch.cat([data.long(), data.new_zeros(4, dtype=torch.long)])
    deltas = ((padded[pos.clamp(max=data.numel())] * used) << (torch.arange(4) * 8)).sum(1)
    return torch.cumsum(deltas, 0)


@register("sketchml")
class SketchML(Compressor):
    name = "sketchml"
    shared_randomness = True

    def __init__(self, buckets: int = 32, rows: int = 2, width: int | None = None,
                 density: float | None = None, seed: int = 0):
        self.buckets = check_int("buckets", buckets, 1)
        if buckets > EMPTY:
            raise ValueError(f"buckets must be <= {EMPTY} (one byte per index), got {buckets}")
        self.rows = check_int("rows", rows, 1)
        self.width = check_int("width", width, 1, allow_none=True)
        if density is not None:
            check_density(density, None)
        self.density = density
        super().__init__(seed=seed)

    def _cells(self, keys: torch.Tensor, numel: int, width: int, salt: int) -> torch.Tensor:
        """Flat MinMaxSketch cells (rows, len(keys)) of ``keys``; hashes shared by all ranks."""
        cache = self.__dict__.setdefault("_hashes", {})
        if (numel, width, salt) not in cache:
            if len(cache) >= 8:  # bound the memory: rows x numel int64 per table
                cache.clear()
            cache[(numel, width, salt)] = random_hash(numel, self.rows, width, self.seed + salt)
        h = cache[(numel, width, salt)][:, keys]
        return h + torch.arange(self.rows).unsqueeze(1) * width

    def _group(self, keys: torch.Tensor, mags: torch.Tensor, salt: int, numel: int):
        """Encode one sign group: (bucket means, sketch, flags, delta bytes)."""
        n = keys.numel()
        order = torch.argsort(mags)
        q = min(self.buckets, n)
        bucket = torch.empty(n, dtype=torch.long)
        bucket[order] = torch.arange(n) * q // max(n, 1)  # equally populated quantile buckets
        means = torch.zeros(q).index_add_(0, bucket, mags) / torch.bincount(bucket, minlength=q).clamp(min=1)
        width = self.width or max(n, 1)
        cells = self._cells(keys, numel, width, salt)
        table = torch.full((self.rows * width,), EMPTY, dtype=torch.uint8)
        table.scatter_reduce_(0, cells.reshape(-1), bucket.repeat(self.rows).to(torch.uint8), "amin")
        flags, data = delta_encode(keys)
        return [means, table, flags, data]

    def encode(self, flat, key):
        x = flat.float().cpu()
        if self.density is not None:
            keep = topk_indices(x, resolve_k(x.numel(), self.density), self.generator)
            keys = keep.sort().values
        else:
            keys = x.nonzero().squeeze(1)
        vals = x[keys]
        pos, neg = vals > 0, vals < 0
        header = torch.tensor([int(pos.sum()), int(neg.sum())], dtype=torch.int32)
        payload = [header] + self._group(keys[pos], vals[pos], 0, x.numel()) \
            + self._group(keys[neg], -vals[neg], 1, x.numel())
        return tuple(p.to(flat.device) for p in payload), None

    def _decode_group(self, parts, count: int, salt: int, numel: int):
        means, table, flags, data = (p.cpu() for p in parts)
        keys = delta_decode(flags, data, count)
        width = table.numel() // self.rows
        cells = self._cells(keys, numel, width, salt)
        index = table[cells].amax(0).long() if count else torch.zeros(0, dtype=torch.long)
        return keys, means[index]

    def decode(self, payload, ctx, numel, dtype):
        npos, nneg = (int(c) for c in payload[0].cpu())
        out = torch.zeros(numel)
        for parts, count, salt, sign in ((payload[1:5], npos, 0, 1.0), (payload[5:9], nneg, 1, -1.0)):
            keys, mags = self._decode_group(parts, count, salt, numel)
            out[keys] = sign * mags
        return out.to(dtype=dtype, device=payload[0].device)

    def __repr__(self):
        return f"SketchML(buckets={self.buckets}, rows={self.rows}, width={self.width}, density={self.density})"
