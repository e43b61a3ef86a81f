"""SketchML: quantile buckets, a grouped MinMaxSketch of bucket indices, delta-binary keys.

Jiang, Fu, Yang, Cui, "SketchML: Accelerating Distributed Machine Learning with Data Sketches",
SIGMOD 2018. Checked against the authors' Java code (github.com/ccchengff/SketchML, module
``sketch``): ``sketch/frequency/MinMaxSketch.java``, ``GroupedMinMaxSketch.java`` and
``FSketchUtils.java``, ``base/Quantizer.java``, ``binary/DeltaBinaryEncoder.java``. A sparse
gradient is a list of (key, value) pairs, sent as:

1. quantile buckets: the values are split into ``buckets`` equally populated buckets (256 in the
   reference), each sent once as its mean; a value becomes its bucket index. Positive and
   negative values get separate buckets (in proportion to their counts) and an index counts
   outwards from zero, so index order is magnitude order.
2. grouped MinMaxSketch: the index range of each sign is cut into runs of
   ``span = ceil(buckets / groups)`` buckets (``groups`` = 8 in the reference: 32 buckets a
   group); each key goes to the group of its bucket, and each group has its own sketch of
   ``rows`` (2) x ``ceil(col_ratio * keys in the group)`` cells (``col_ratio`` = 0.3), each cell
   holding an offset inside the group in ``ceil(log2(span))`` bits (5), bit-packed. Insert keeps
   the *minimum* offset hashed to a cell; a query takes the *maximum* of the key's cells over
   the rows. Every cell a key touches holds its own offset or a smaller one, so a decoded index
   never exceeds the true one, and never leaves the key's group (it is at least the group's
   lowest index). At the defaults the sketch costs 2 * 0.3 * 5 / 8 = 0.375 bytes a key, where
   the raw index costs one byte.
3. delta-binary keys: each group's sorted keys are sent as differences, each in 1 to 4 bytes,
   with a 2-bit length flag per key.

What holds for magnitudes (the decoded value of a key is the mean of its decoded bucket): it
never exceeds the mean of the key's true bucket (the quantizer's own value), never falls below
the mean of the lowest bucket of its group, and has the key's sign. It *can* exceed the key's
own magnitude (by at most its bucket's width): about half the keys lie below their bucket's
mean, and collisions pull only some of them down (about 2 keys in 10 come back enlarged at the
defaults, on random and on real gradients; tests/test_sketch.py, Part 6.2).

Where ours differs from the reference, and why: buckets are represented by their mean (the
reference: the midpoint of the bucket's two split values), which minimises the squared error
in a bucket; quantiles are exact (the reference streams them through a quantile sketch); each
sign has its own buckets, where the reference quantizes signed values and aligns its groups at
the bucket holding zero, so one bucket there mixes small negative and positive values; a
row's hash is ((a k + b) mod p) mod width with a, b drawn from a seed sent in the header, new
at every call, so collisions fall on other keys at the next step (the reference picks among
fixed hash functions and serializes them with the sketch); cells are packed at
``ceil(log2(span))`` bits (the reference as of commit 208b587 prices them at
``floor(log2(span))``, one bit short for a span that is not a power of two); a delta may take
3 bytes (``DeltaBinaryEncoder``: 1, 2 or 4). The reference's last commits (August 2018)
Huffman-code the sketch table and switch to an adaptive bit-width delta encoder; we keep the
bit-packed cells and byte-aligned deltas of its earlier commits.

``density`` (optional) first keeps the largest entries, for dense gradients (then biased: wrap
it with ``ef``); by default every nonzero entry is a key. Runs on the CPU (the payload is
moved to the tensor's device).
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import torch

from ..argspec import Arg, takes
from .base import Compressor, Part, PayloadError, WireFormat, register
from .packing import pack_uint, unpack_uint
from .topk import resolve_k, topk_indices

PRIME = 2 ** 31 - 1  # the modulus of the rows' hashes (a Mersenne prime)
UNSET = torch.iinfo(torch.int64).max  # a cell no key was inserted into


def _encode_deltas(deltas: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Deltas in [0, 2**32) -> (2-bit length flags packed, delta bytes little endian)."""
    nbytes = 1 + (deltas >= 1 << 8).long() + (deltas >= 1 << 16).long() + (deltas >= 1 << 24).long()
    table = deltas.numpy().astype("<u4").view(np.uint8).reshape(-1, 4)  # (n, 4) bytes
    used = torch.arange(4) < nbytes.unsqueeze(1)
    return pack_uint((nbytes - 1).to(dtype=torch.uint8), 2), torch.from_numpy(table[used.numpy()])


def _decode_deltas(flags: torch.Tensor, data: torch.Tensor, count: int) -> torch.Tensor:
    used = torch.arange(4) < unpack_uint(flags, count, 2).unsqueeze(1) + 1
    table = np.zeros((count, 4), dtype=np.uint8)
    table[used.numpy()] = data.numpy()  # row by row, in the order they were taken
    return torch.from_numpy(table.view("<u4").reshape(-1).astype(np.int64))


def delta_encode(keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sorted int64 ``keys`` -> (2-bit length flags packed, delta bytes little endian)."""
    return _encode_deltas(torch.diff(keys, prepend=keys.new_zeros(1)))


def delta_decode(flags: torch.Tensor, data: torch.Tensor, count: int) -> torch.Tensor:
    """The ``count`` sorted keys that :func:`delta_encode`'s flags and bytes spell."""
    return torch.cumsum(_decode_deltas(flags, data, count), 0)


def quantile_buckets(mags: torch.Tensor, q: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``q`` equally populated buckets of ``mags`` (index 0 the smallest): (bucket, means)."""
    n = mags.numel()
    bucket = torch.empty(n, dtype=torch.long)
    bucket[torch.argsort(mags)] = torch.arange(n) * q // max(n, 1)
    count = torch.bincount(bucket, minlength=q).clamp(min=1)
    return bucket, torch.zeros(q).index_add_(0, bucket, mags) / count


def minmax_insert(cells: torch.Tensor, values: torch.Tensor, size: int) -> torch.Tensor:
    """MinMaxSketch insert (Min): a table of ``size`` cells, each the smallest of the ``values``
    (n,) whose keys hash to it; ``cells`` (n, rows) is each key's cell in every row."""
    table = torch.full((size,), UNSET, dtype=torch.int64)
    return table.scatter_reduce_(0, cells.reshape(-1), values.repeat_interleave(cells.shape[1]),
                                 "amin")


def minmax_query(table: torch.Tensor, cells: torch.Tensor) -> torch.Tensor:
    """MinMaxSketch query (Max): the largest of each key's cells over the rows."""
    return table[cells].amax(dim=1)


@register("sketchml")
@takes(buckets=Arg(int, ge=1, le=2 ** 16, help="quantile buckets (both signs together)"),
       groups=Arg(int, ge=1, le=2 ** 16, help="groups of buckets, one MinMaxSketch each"),
       col_ratio=Arg(float, gt=0, le=100, help="sketch columns per key of a group"),
       rows=Arg(int, ge=1, le=64, help="rows of each MinMaxSketch"),
       density=Arg(float, gt=0, le=1, none=True, help="keep the largest entries first (None: "
                                                      "every nonzero entry)"))
class SketchML(Compressor):
    """SketchML's quantile buckets, grouped MinMaxSketch and delta-binary keys (module
    docstring)."""
    name = "sketchml"
    shared_randomness = True
    wire_vars_read_payload = True  # the header says how long the other parts are
    checks_in_decode = True  # decoded keys within the tensor, buckets within their sign's
    wire = WireFormat(
        Part("header", torch.int32, "3 + groups", "0..2**31 - 1"),
        Part("means", torch.float32, "qpos + qneg", "finite >= 0"),
        Part("tables", torch.uint8, "table_bytes"),
        Part("flags", torch.uint8, "ceil(keys / 4)"),
        Part("data", torch.uint8, "keys..4 * keys"),
        where={"header": "hash seed, npos, nneg, then the keys of each group",
               "keys": "npos + nneg <= n", "qpos, qneg": "buckets of each sign",
               "groups": "ceil(qpos / span) + ceil(qneg / span)",
               "table_bytes": "sum over groups of ceil(rows * ceil(col_ratio * keys of the "
                              "group) * ceil(log2(span)) / 8)"},
        note="the data part holds exactly sum(flag + 1) bytes; decoded keys lie in [0, n) and "
             "decoded buckets within their sign's buckets (checked)")

    def __init__(self, buckets: int = 256, groups: int = 8, col_ratio: float = 0.3,
                 rows: int = 2, density: float | None = None, seed: int = 0):
        self.buckets, self.groups, self.rows = buckets, groups, rows
        self.col_ratio = float(col_ratio)
        self.density = density
        self.span = -(-buckets // groups)  # buckets per group
        super().__init__(seed=seed)

    # -- the layout both sides derive from the header -----------------------------------------
    def buckets_per_sign(self, npos: int, nneg: int) -> tuple[int, int]:
        """Buckets of each sign, in proportion to its keys (at least one for a sign with keys);
        the payload's means are the positive buckets' then the negative ones'."""
        n, b = npos + nneg, self.buckets
        if n == 0:
            return 0, 0
        bpos = (2 * b * npos + n) // (2 * n)  # round(b * npos / n) in integers
        if npos and nneg:
            bpos = min(max(bpos, 1), max(b - 1, 1))
        bneg = max(b - bpos, 1) if nneg else 0
        return min(bpos, npos), min(bneg, nneg)

    def _layout(self, qpos: int, qneg: int, counts=None) -> SimpleNamespace:
        sign, lo, size = [], [], []
        for s, q in enumerate((qpos, qneg)):
            for start in range(0, q, self.span):
                sign.append(s), lo.append(start), size.append(min(self.span, q - start))
        lay = SimpleNamespace(sign=torch.tensor(sign, dtype=torch.long),
                              lo=torch.tensor(lo, dtype=torch.long), groups=len(sign),
                              bits=[(s - 1).bit_length() for s in size], first_neg=sign.count(0))
        if counts is not None:
            lay.counts = [int(c) for c in counts]
            lay.width = [math.ceil(c * self.col_ratio) if bits else 0
                         for c, bits in zip(lay.counts, lay.bits)]
            lay.cell_start = [0]
            for w in lay.width:
                lay.cell_start.append(lay.cell_start[-1] + self.rows * w)
        return lay

    def _cells(self, keys, gid, lay, hseed) -> torch.Tensor:
        """(n, rows): each key's flat cell in its group's sketch, ((a k + b) mod p) mod width."""
        ab = torch.randint(1, PRIME, (2, max(lay.groups, 1), self.rows),
                           generator=torch.Generator().manual_seed(hseed))
        width = torch.tensor(lay.width, dtype=torch.long)[gid].unsqueeze(1)
        h = (ab[0][gid] * (keys % PRIME).unsqueeze(1) + ab[1][gid]) % PRIME % width
        start = torch.tensor(lay.cell_start[:-1], dtype=torch.long)[gid].unsqueeze(1)
        return start + torch.arange(self.rows) * width + h

    # -- encode ---------------------------------------------------------------------------------
    def bucket_indices(self, flat: torch.Tensor):
        """The quantizer alone, in key order: (keys, negative?, bucket index within the sign,
        bucket means: positive ones then negative ones)."""
        x = flat.detach().reshape(-1).float().cpu()
        if self.density is not None:
            keys = topk_indices(x, resolve_k(x.numel(), self.density), self.generator).sort().values
        else:
            keys = x.nonzero().squeeze(1)
        vals = x[keys]
        keys, vals = keys[vals != 0], vals[vals != 0]
        neg = vals < 0
        qs = self.buckets_per_sign(int((~neg).sum()), int(neg.sum()))
        bucket, means = torch.empty_like(keys), []
        for mask, q in zip((~neg, neg), qs):
            bucket[mask], m = quantile_buckets(vals[mask].abs(), q)
            means.append(m)
        return keys, neg, bucket, torch.cat(means)

    def encode(self, flat, key):
        keys, neg, bucket, means = self.bucket_indices(flat)
        npos, nneg = int((~neg).sum()), int(neg.sum())
        lay = self._layout(*self.buckets_per_sign(npos, nneg))
        gid = bucket // self.span + neg.long() * lay.first_neg
        order = torch.sort(gid, stable=True).indices  # group by group, keys still ascending
        keys, gid, offset = keys[order], gid[order], bucket[order] % self.span
        counts = torch.bincount(gid, minlength=lay.groups)
        lay = self._layout(*self.buckets_per_sign(npos, nneg), counts)
        hseed = int(torch.randint(PRIME, (1,), generator=self.generator))
        sketched = torch.tensor(lay.bits, dtype=torch.long)[gid] > 0
        cells = self._cells(keys[sketched], gid[sketched], lay, hseed)
        table = minmax_insert(cells, offset[sketched], lay.cell_start[-1])
        table[table == UNSET] = 0
        tables = [pack_uint(table[a:b], bits, check=False)
                  for a, b, bits in zip(lay.cell_start, lay.cell_start[1:], lay.bits) if b > a]
        first = torch.ones_like(gid, dtype=torch.bool)
        first[1:] = gid[1:] != gid[:-1]  # each group's deltas start from key 0
        flags, data = _encode_deltas(keys - torch.where(first, 0, keys.roll(1)))
        header = torch.tensor([hseed, npos, nneg, *counts.tolist()], dtype=torch.int32)
        tables = torch.cat(tables) if tables else torch.zeros(0, dtype=torch.uint8)
        return tuple(p.to(flat.device) for p in (header, means, tables, flags, data)), None

    def wire_vars(self, numel, ctx, payload):
        header = payload[0]
        if header.numel() < 3:
            raise PayloadError(self.name, "header", "at least 3 entries (seed, npos, nneg)",
                               f"{header.numel()}")
        head = header.cpu().tolist()
        npos, nneg = head[1], head[2]
        if npos < 0 or nneg < 0 or npos + nneg > numel:
            raise PayloadError(self.name, "header", f"npos, nneg >= 0 with npos + nneg <= {numel}",
                               f"npos={npos}, nneg={nneg}")
        qpos, qneg = self.buckets_per_sign(npos, nneg)
        lay = self._layout(qpos, qneg)
        names = {"qpos": qpos, "qneg": qneg, "groups": lay.groups, "keys": npos + nneg,
                 "table_bytes": 0}
        counts = head[3:]
        if len(counts) == lay.groups:  # else the header's length is named first
            if min(counts, default=0) < 0 or sum(counts) != npos + nneg:
                raise PayloadError(self.name, "header", f"keys per group >= 0, summing to "
                                   f"{npos + nneg}", f"{counts}")
            lay = self._layout(qpos, qneg, counts)
            names["table_bytes"] = sum((b - a) * bits + 7 >> 3 for a, b, bits in
                                       zip(lay.cell_start, lay.cell_start[1:], lay.bits))
        return names

    # -- decode ---------------------------------------------------------------------------------
    def decode_indices(self, payload):
        """The sketch's answer, in payload order: (keys, negative?, decoded bucket index)."""
        header, _, tables, flags, data = (p.cpu() for p in payload)
        hseed, npos, nneg = (int(v) for v in header[:3])
        lay = self._layout(*self.buckets_per_sign(npos, nneg), header[3:])
        counts = torch.tensor(lay.counts, dtype=torch.long)
        gid = torch.repeat_interleave(torch.arange(lay.groups), counts)
        used = int(unpack_uint(flags, npos + nneg, 2).sum()) + npos + nneg
        if used != data.numel():
            raise PayloadError(self.name, "data", f"{used} bytes (the flags' lengths)",
                               f"{data.numel()}")
        deltas = _decode_deltas(flags, data, npos + nneg)
        before = torch.cumsum(deltas, 0) - deltas  # the sum of the deltas before each key
        keys = before + deltas - before[(torch.cumsum(counts, 0) - counts)[gid]]
        table, at = torch.zeros(lay.cell_start[-1], dtype=torch.long), 0
        for a, b, bits in zip(lay.cell_start, lay.cell_start[1:], lay.bits):
            if b > a:
                nbytes = (b - a) * bits + 7 >> 3
                table[a:b] = unpack_uint(tables[at:at + nbytes], b - a, bits)
                at += nbytes
        offset = torch.zeros_like(keys)
        sketched = torch.tensor(lay.bits, dtype=torch.long)[gid] > 0
        cells = self._cells(keys[sketched], gid[sketched], lay, hseed)
        offset[sketched] = minmax_query(table, cells)
        return keys, lay.sign[gid] == 1, lay.lo[gid] + offset

    def _check_decoded(self, keys, neg, bucket, numel, qpos, qneg):
        """Keys within the tensor, buckets within their sign's (a corrupt table can point
        past them)."""
        if keys.numel() and int(keys.max()) >= numel:
            raise PayloadError(self.name, "data", f"keys < {numel}", f"key {int(keys.max())}")
        q = torch.where(neg, qneg, qpos)
        if keys.numel() and bool((bucket >= q).any()):
            raise PayloadError(self.name, "tables", "bucket offsets within each group",
                               "an offset past its sign's buckets")

    def decode(self, payload, ctx, numel, dtype):
        keys, neg, bucket = self.decode_indices(payload)
        qpos, qneg = self.buckets_per_sign(*(int(v) for v in payload[0][1:3].cpu()))
        self._check_decoded(keys, neg, bucket, numel, qpos, qneg)
        vals = payload[1].cpu()[bucket + neg.long() * qpos]
        out = torch.zeros(numel)
        out[keys] = torch.where(neg, -vals, vals)
        return out.to(dtype=dtype, device=payload[0].device)

    def __repr__(self):
        return (f"SketchML(buckets={self.buckets}, groups={self.groups}, "
                f"col_ratio={self.col_ratio}, rows={self.rows}, density={self.density})")
