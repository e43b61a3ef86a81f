"""The codecs' device paths: a whole encode or decode step as one fused GPU function.

On a GPU each torch op is a kernel that reads and writes the whole tensor, so a codec written
as a chain of ops (compare, shift, or, gather, multiply, cast) costs many times a memory copy:
the GPU check (``tools/gpu_check.py``, an H200, 64M values) measured sign bits at 5.9x a copy,
QSGD at 21x, TernGrad at 13x. Each function here is such a chain written once, readable, and
run through :func:`~lab.compress.fused.fused`, which compiles it on a GPU into one or two
kernels (the plain function stays the reference: the CPU, small tensors, ``LAB_FUSE=0``).
The layouts are :mod:`lab.compress.packing`'s (little-endian bits, code j at bits
``[j * bits, (j + 1) * bits)``), so a payload made here decodes anywhere and the tests compare
both, bit for bit, on the CPU.

:func:`usable` says where a codec takes these paths: on ``FUSE_DEVICES`` (CUDA; the tests add
the CPU) and for tensors whose values fill whole bytes (``numel`` a multiple of 8), the others
keep their general route.
"""
from __future__ import annotations

import torch

from . import fused as _fused
from .fused import fused


def usable(x: torch.Tensor, numel: int | None = None) -> bool:
    """Whether ``x`` (or a payload of ``numel`` values in ``x``) takes the device path: a device
    in ``FUSE_DEVICES`` and whole bytes (``numel``, a multiple of 8)."""
    n = x.numel() if numel is None else numel
    return _fused.on_device_path(x) and n % 8 == 0 and n > 0


def _shifts(per: int, bits: int, device) -> torch.Tensor:
    return torch.arange(per, device=device, dtype=torch.int32) * bits


@fused
def pack_codes(codes, bits: int):
    """uint8 codes (< 2**bits, ``numel`` a multiple of 8 // bits) packed 8 // bits to a byte."""
    per = 8 // bits
    cols = codes.reshape(-1, per).to(dtype=torch.int32)
    return (cols << _shifts(per, bits, codes.device)).sum(dim=1).to(dtype=torch.uint8)


@fused
def expand_table(packed, values, bits: int):
    """``values[code]`` for every ``bits``-bit code in uint8 ``packed`` (``values``: 2**bits)."""
    per = 8 // bits
    codes = (packed.reshape(-1, 1).to(dtype=torch.int32) >> _shifts(per, bits, packed.device)) \
        & ((1 << bits) - 1)
    return values[codes.reshape(-1).long()]


@fused
def sign_bits_l1(x):
    """Packed sign bits of float32 ``x`` (bit 1 for ``x >= 0``) and ``sum |x|`` (float32: NaN
    or Inf in ``x`` make it non-finite), in one pass."""
    cols = (x.reshape(-1, 8) >= 0).to(dtype=torch.int32)
    bits = (cols << _shifts(8, 1, x.device)).sum(dim=1).to(dtype=torch.uint8)
    return bits, x.abs().sum()


@fused
def cast_checked(x, dtype):
    """``x`` cast to ``dtype`` and whether every cast value is finite (a cast carries NaN and
    Inf along and turns overflow into Inf, so this checks the input too), in one pass."""
    wire = x.to(dtype=dtype)
    return wire, torch.isfinite(wire).all()


@fused
def qsgd_encode(v, norm, u, s: int, bits: int):
    """QSGD's levels (:func:`lab.compress.qsgd.stochastic_levels`: level l + 1 with probability
    r - l for r = s |v| / norm, u uniform) and sign bits of the buckets ``v`` (rows x bucket,
    ``norm`` rows x 1), both packed: (sign bytes, level bytes)."""
    r = (v.abs() / norm * s).clamp(max=s)
    low = r.floor()
    levels = (low + (u < r - low).float()).to(dtype=torch.int32).reshape(-1, 8 // bits)
    packed = (levels << _shifts(8 // bits, bits, v.device)).sum(dim=1).to(dtype=torch.uint8)
    neg = (v.reshape(-1, 8) < 0).to(dtype=torch.int32)
    signs = (neg << _shifts(8, 1, v.device)).sum(dim=1).to(dtype=torch.uint8)
    return signs, packed


@fused
def qsgd_decode(norms, signs, levels, s: int, bucket: int, bits: int):
    """float32 ``norm * sign * level / s`` from packed sign and level bytes, ``numel`` =
    ``norms.numel() * bucket`` (every bucket whole)."""
    per = 8 // bits
    lv = (levels.reshape(-1, 1).to(dtype=torch.int32) >> _shifts(per, bits, levels.device)) \
        & ((1 << bits) - 1)
    neg = (signs.reshape(-1, 1).to(dtype=torch.int32) >> _shifts(8, 1, signs.device)) & 1
    mag = lv.reshape(-1, bucket).float() * norms.float().reshape(-1, 1) / s
    return torch.where(neg.reshape(-1, bucket) > 0, -mag, mag).reshape(-1)
