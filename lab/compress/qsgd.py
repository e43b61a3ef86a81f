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

from .base import Compressor, bernoulli, check_finite, check_int, register, truncate
from .packing import expand_codes, pack_bits, pack_uint, unpack_uint
from .fused import fused
from .sign import nonnegative, set_sign, signs_from_bits


def bucket_norms(buckets: torch.Tensor) -> torch.Tensor:
    """l2 norm of each row, float32, without overflow: ||v|| = m ||v / m||, m = max|v|.

    Squaring 1e30 overflows float32 (the naive norm returns Inf and the codec NaN); scaling
    first is only needed then, so it runs only when a plain norm came out infinite."""
    norms = torch.linalg.vector_norm(buckets, dim=1)
    if not torch.isfinite(norms).all():
        check_finite(buckets, "qsgd")  # NaN or Inf in the input; else the squares overflowed
        m = buckets.abs().amax(dim=1, keepdim=True).clamp(min=torch.finfo(torch.float32).tiny)
        norms = (torch.linalg.vector_norm(buckets / m, dim=1, dtype=torch.float64)
                 * m.reshape(-1).double())
        if not torch.isfinite(norms.float()).all():
            raise OverflowError("qsgd: a bucket's l2 norm exceeds the float32 range "
                                f"({norms.max().item():.3g}); scale the tensor first")
        norms = norms.float()
    return norms


def as_buckets(x: torch.Tensor, bucket: int) -> torch.Tensor:
    """``x`` zero-padded to whole buckets, viewed as (buckets, bucket) (no copy if it fits)."""
    pad = (-x.numel()) % bucket
    return (torch.cat([x, x.new_zeros(pad)]) if pad else x).view(-1, bucket)


def quantize(flat: torch.Tensor, s: int, bucket: int, generator: torch.Generator):
    """Return (norms float32 per bucket, levels in [0, s], negative bool) for ``flat``.

    Levels are uint8 when s < 256 (int32 beyond). ``generator`` must live on ``flat``'s
    device (:meth:`Compressor.generator_for`)."""
    x = flat.float()
    n = x.numel()
    v = as_buckets(x, bucket)
    norms = bucket_norms(v)
    safe = torch.where(norms > 0, norms, torch.ones_like(norms))  # an all-zero bucket stays 0
    wide = torch.uint8 if s < 256 else torch.int32
    if x.device.type == "cuda":  # one uniform per value is cheap there; fuse the whole chain
        u = torch.rand(v.shape, generator=generator, device=v.device)
        levels = stochastic_levels(v, safe[:, None], u, s, wide)
    else:
        r = v.abs().div_(safe[:, None]).mul_(s).clamp_(max=s)  # rounding may give |v_i| > ||v||
        r = r.reshape(-1)[:n]
        low = truncate(r, wide)  # floor(r), as r >= 0
        up = bernoulli(r.sub_(low), generator)  # P(up) = s|v_i|/||v|| - l
        levels = low.add_(up)  # (Lemma 3.1); random bits for the n values only
    return norms, levels.reshape(-1)[:n], nonnegative(x).logical_not_()  # x < 0


@fused
def stochastic_levels(v, norm, u, s: int, dtype):
    """Level l + 1 with probability r - l, else l, for r = s |v| / norm (u uniform in [0, 1))."""
    r = (v.abs() / norm * s).clamp(max=s)
    low = r.floor()
    return (low + (u < r - low).float()).to(dtype)


def dequantize(norms, levels, negative, s: int, bucket: int, numel: int) -> torch.Tensor:
    """float32 values ``norm * sign * level / s`` (``negative``: bool, or packed sign bits)."""
    mag = as_buckets(levels, bucket).float().mul_(norms.float()[:, None]).div_(s)
    mag = mag.reshape(-1)[:numel]
    if negative.dtype == torch.uint8:  # packed: multiply by +-1 read from a byte table
        return mag * signs_from_bits(~negative, numel)
    return set_sign(mag.contiguous(), negative)


@register("qsgd")
class QSGD(Compressor):
    """QSGD with ``s`` levels and buckets of ``bucket_size`` values (None: one bucket)."""
    fixed_size = True
    checks_finite = True  # through its bucket norms

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
        norms, levels, neg = quantize(flat, self.s, self._bucket(flat.numel()),
                                      self.generator_for(flat.device))
        return (norms, pack_bits(neg), pack_uint(levels, self.bits, check=False)), None

    def decode(self, payload, ctx, numel, dtype):
        norms, signs, levels = payload
        if self.bits in (1, 2, 4, 8):  # each level as a float straight from a byte table
            levels = expand_codes(levels, numel, self.bits, torch.arange(2 ** self.bits,
                                  dtype=torch.float32, device=levels.device))
        else:
            levels = unpack_uint(levels, numel, self.bits, torch.int32)
        out = dequantize(norms, levels, signs,
                         self.s, self._bucket(numel), numel)
        return out.to(dtype)

    def __repr__(self):
        return f"{type(self).__name__}(s={self.s}, bucket_size={self.bucket_size})"
