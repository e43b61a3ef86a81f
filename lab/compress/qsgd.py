"""QSGD: unbiased stochastic quantisation onto s levels per bucket.

Alistarh, Grubic, Li, Tomioka, Vojnovic, "QSGD: Communication-Efficient SGD via Gradient
Quantization and Encoding", NeurIPS 2017 (Sec. 3.1). For a bucket v of n values:

    Q_s(v_i) = ||v||_2 * sign(v_i) * xi_i(v, s),   xi_i = l/s  or  (l+1)/s,

where l/s <= |v_i|/||v|| < (l+1)/s and the upper level is taken with probability
s|v_i|/||v|| - l, so E[Q_s(v)] = v (Lemma 3.1) and
E||Q_s(v) - v||^2 <= min(n/s^2, sqrt(n)/s) ||v||^2.

Wire (this fixed-length variant): one float32 norm per bucket, ceil(n/8) bytes of sign bits and
ceil(n * b / 8) bytes of levels with b = ceil(log2(s + 1)) bits. The paper's Elias-coded
variant for small s is :mod:`lab.compress.qsgd_elias`.
"""
from __future__ import annotations

import torch

from .base import Compressor, check_int, register
from .packing import pack_bits, pack_uint, unpack_bits, unpack_uint


def quantize(flat: torch.Tensor, s: int, bucket: int, generator: torch.Generator):
    """Return (norms float32 per bucket, levels int64 in [0, s], negative bool) for ``flat``."""
    x = flat.float()
    n = x.numel()
    nb = -(-n // bucket)
    padded = torch.cat([x, x.new_zeros(nb * bucket - n)]).view(nb, bucket)
    norms = padded.norm(dim=1)
    ids = torch.arange(n, device=x.device) // bucket
    safe = torch.where(norms > 0, norms, torch.ones_like(norms))  # an all-zero bucket stays 0
    r = (x.abs() / safe[ids] * s).clamp(max=s)  # clamp: float rounding may put |v_i| > ||v||
    low = r.floor()
    u = torch.rand(n, generator=generator).to(x.device)
    levels = (low + (u < r - low).float()).long().clamp(max=s)
    return norms, levels, x < 0


def dequantize(norms, levels, negative, s: int, bucket: int, numel: int) -> torch.Tensor:
    """float32 values ``norm * sign * level / s``."""
    ids = torch.arange(numel, device=levels.device) // bucket
    mag = norms.float()[ids] * levels.float() / s
    return torch.where(negative, -mag, mag)


@register("qsgd")
class QSGD(Compressor):
    """QSGD with ``s`` levels and buckets of ``bucket_size`` values (None: one bucket)."""
    fixed_size = True

    name = "qsgd"

    def __init__(self, s: int = 15, bucket_size: int | None = 512, seed: int = 0):
        self.s = check_int("s", s, 1)
        self.bucket_size = check_int("bucket_size", bucket_size, 1, allow_none=True)
        self.bits = s.bit_length()  # ceil(log2(s + 1)): levels 0..s
        if self.bits > 32:
            raise ValueError(f"s must be < 2**32 (levels are packed in at most 32 bits), got {s}")
        super().__init__(seed=seed)

    def _bucket(self, numel: int) -> int:
        return self.bucket_size or max(numel, 1)

    def encode(self, flat, key):
        norms, levels, neg = quantize(flat, self.s, self._bucket(flat.numel()), self.generator)
        return (norms, pack_bits(neg), pack_uint(levels, self.bits)), None

    def decode(self, payload, ctx, numel, dtype):
        norms, signs, levels = payload
        out = dequantize(norms, unpack_uint(levels, numel, self.bits), unpack_bits(signs, numel),
                         self.s, self._bucket(numel), numel)
        return out.to(dtype)

    def __repr__(self):
        return f"{type(self).__name__}(s={self.s}, bucket_size={self.bucket_size})"
