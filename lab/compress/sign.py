"""signSGD: one bit per coordinate, the sign of the gradient.

Bernstein, Wang, Azizzadenesheli, Anandkumar, "signSGD: Compressed Optimisation for Non-Convex
Problems", ICML 2018 (Algorithm 1: x <- x - lr * sign(g)).

The payload is the packed sign bits, ceil(n/8) bytes and nothing else (scale 1). ``sign(0)`` is
mapped to +1 on purpose: a three-valued ``torch.sign`` cannot travel in one bit, and code that
uses it silently drops (or mis-signs) every zero. NaN never gets here: ``compress`` refuses it,
because ``NaN >= 0`` is False and a NaN would otherwise become a -1 without a trace.
"""
from __future__ import annotations

import torch

from .base import Compressor, register
from .packing import pack_bits, unpack_bits


def sign_bits(flat: torch.Tensor) -> torch.Tensor:
    """Packed sign bits of ``flat``: bit 1 for ``x >= 0`` (so sign(0) = +1), 0 for ``x < 0``."""
    return pack_bits(flat >= 0)


def signs_from_bits(packed: torch.Tensor, numel: int) -> torch.Tensor:
    """Inverse of :func:`sign_bits`: a float32 tensor of +1/-1."""
    return unpack_bits(packed, numel).to(torch.float32) * 2 - 1


@register("sign")
class Sign(Compressor):
    """Send ``sign(x)`` as packed bits; decode to +-1 in the requested dtype."""
    fixed_size = True

    name = "sign"

    def encode(self, flat, key):
        return (sign_bits(flat),), None

    def decode(self, payload, ctx, numel, dtype):
        return signs_from_bits(payload[0], numel).to(dtype)
