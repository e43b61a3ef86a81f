"""signSGD: one bit per coordinate, the sign of the gradient.

Bernstein, Wang, Azizzadenesheli, Anandkumar, "signSGD: Compressed Optimisation for Non-Convex
Problems", ICML 2018 (Algorithm 1: x <- x - lr * sign(g)).

The payload is the packed sign bits, ceil(n/8) bytes and nothing else (scale 1). ``sign(0)`` is
mapped to +1 on purpose: a three-valued ``torch.sign`` cannot travel in one bit, and code that
uses it silently drops (or mis-signs) every zero. NaN never gets here: ``compress`` refuses it,
because ``NaN >= 0`` is False and a NaN would otherwise become a -1 without a trace.
"""
from __future__ import annotations

import math

import torch

from . import device, native, native_small
from .base import Compressor, Part, WireFormat, check_finite, register
from .packing import expand_bits, expand_codes, pack_bits


def nonnegative(x: torch.Tensor) -> torch.Tensor:
    """``x >= 0`` as a bool tensor (numpy's SIMD compare for float32 on the CPU: ~2x torch's)."""
    if x.is_cpu and x.dtype == torch.float32:
        return torch.from_numpy(x.detach().contiguous().numpy() >= 0)
    return x >= 0


def negative(x: torch.Tensor) -> torch.Tensor:
    """``x < 0`` as a bool tensor (numpy's compare for float32 on the CPU)."""
    if x.is_cpu and x.dtype == torch.float32:
        return torch.from_numpy(x.detach().contiguous().numpy() < 0)
    return x < 0


def sign_bits(flat: torch.Tensor) -> torch.Tensor:
    """Packed sign bits of ``flat``: bit 1 for ``x >= 0`` (so sign(0) = +1), 0 for ``x < 0``."""
    if flat.dtype == torch.float32 and native.enabled(flat):  # compare and pack in one pass
        return native.sign_bits(flat, with_sum=False)[0]
    return pack_bits(nonnegative(flat))


def set_sign(mag: torch.Tensor, negative: torch.Tensor) -> torch.Tensor:
    """``-mag`` where ``negative``, ``mag`` elsewhere, for float32 ``mag >= 0``, in place.

    Readable form: ``torch.where(negative, -mag, mag)``; this ORs the sign bit into the float's
    bit pattern instead, which gives the same values (-0.0 for a negated zero) at a fraction of
    the cost of ``where`` on the CPU."""
    bits = mag.view(torch.int32)
    bits.bitwise_or_(negative.reshape(mag.shape).to(dtype=torch.int32).bitwise_left_shift_(31))
    return mag


_SIGN_BIT = torch.tensor([0, -2 ** 31], dtype=torch.int32)  # bit 31 set, as an int32


def set_sign_bits(mag: torch.Tensor, packed: torch.Tensor) -> torch.Tensor:
    """:func:`set_sign` with the ``negative`` flags packed (:func:`pack_bits`): each flag's
    sign bit comes from a byte table (:func:`expand_codes`), then one OR. In place."""
    bits = expand_codes(packed, mag.numel(), 1, _SIGN_BIT)
    mag.view(torch.int32).bitwise_or_(bits.view(mag.shape))
    return mag


def signs_from_bits(packed: torch.Tensor, numel: int, scale: torch.Tensor | float = 1.0):
    """Inverse of :func:`sign_bits`: float32 ``scale * (2 b - 1)``, i.e. +-scale.

    Readable form: ``(unpack_bits(packed, numel).float() * 2 - 1) * scale``; read from a
    byte table instead (:func:`~lab.compress.packing.expand_bits`), the same values."""
    if scale.__class__ is float and native.enabled(packed) and packed.dtype is torch.uint8 \
            and packed.is_contiguous():  # no tensors built for +-scale: the small-tensor path
        return native.expand_pair(packed, numel, -scale, scale)  # float32 rounding: ctypes
    s = torch.as_tensor(scale, dtype=torch.float32, device=packed.device).reshape(())
    return expand_bits(packed, numel, s, -s)


@register("sign")
class Sign(Compressor):
    """Send ``sign(x)`` as packed bits; decode to +-1 in the requested dtype."""
    fixed_size = True

    name = "sign"
    wire = WireFormat(Part("signs", torch.uint8, "ceil(n / 8)"))

    checks_finite = True  # on the C path through sum |x| (NaN/Inf make it non-finite)

    def encode_plain(self, x, key):
        # what encode's C path does, sum |x| in the same pass (NaN/Inf: the general route)
        n = x.numel()
        if n:
            bits = native_small.BYTES.new_empty((n + 7) // 8)
            if math.isfinite(native_small.K.lab_sign_bits(x.data_ptr(), n, bits.data_ptr(), 1)):
                return (bits,), None
        return None

    def decode_plain(self, payload, n):
        got = native_small.parts(payload, (torch.uint8, (n + 7) // 8))
        return None if got is None else native_small.expand_pair(got[0], n, -1.0, 1.0)

    def encode(self, flat, key):
        if flat.dtype == torch.float32 and native.enabled(flat):  # bits and the check, one pass
            bits, l1 = native.sign_bits(flat)
            if not math.isfinite(l1):
                check_finite(flat, self.name)  # raises: NaN or Inf in the input
            return (bits,), None
        if flat.dtype == torch.float32 and device.usable(flat):  # the same, one fused kernel
            bits, l1 = device.sign_bits_l1(flat)
            if not torch.isfinite(l1):
                check_finite(flat, self.name)  # raises on NaN/Inf; else the sum overflowed
            return (bits,), None
        check_finite(flat, self.name)
        return (sign_bits(flat),), None

    def decode(self, payload, ctx, numel, dtype):
        out = signs_from_bits(payload[0], numel, 1.0)
        return out if dtype is torch.float32 else out.to(dtype=dtype)
