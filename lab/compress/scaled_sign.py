"""Scaled sign and EF-SGD (error feedback fixes signSGD).

Karimireddy, Rebjock, Stich, Jaggi, "Error Feedback Fixes SignSGD and other Gradient
Compression Schemes", ICML 2019: Algorithm 1 (EF-signSGD), the scaled-sign instance of
Algorithm 2 (EF-SGD):

    p = lr * g + e,    delta = (||p||_1 / d) * sign(p),    x <- x - delta,    e <- p - delta

Wire: packed signs (ceil(d/8) bytes) plus one float32 scale. ``sign(0) = +1`` as in
:mod:`lab.compress.sign`. The ``efsgd`` codec wraps the scaled sign in
:class:`~lab.compress.error_feedback.ErrorFeedback`, whose residual lives in gradient units
(``p = g + e``): with a constant learning rate that is the paper's rule divided by ``lr``
(the scaled sign is positively homogeneous, C(lr p) = lr C(p)); with a changing rate the
residual should be rescaled by lr_old / lr_new, which the optimizer side must do.
"""
from __future__ import annotations

import ctypes
import math

import torch

from . import native
from .base import Compressor, Part, WireFormat, check_finite, float32s, register
from .error_feedback import ErrorFeedback
from .sign import sign_bits, signs_from_bits


@register("scaled_sign")
class ScaledSign(Compressor):
    """``(||x||_1 / d) * sign(x)``: the sign, rescaled so that its l1 norm equals x's."""
    fixed_size = True
    checks_finite = True  # through its l1 norm

    name = "scaled_sign"
    wire = WireFormat(Part("signs", torch.uint8, "ceil(n / 8)"),
                      Part("scale", torch.float32, "1", "finite >= 0"))

    def encode(self, flat, key):
        n = flat.numel()
        if not n:
            return (sign_bits(flat), flat.new_zeros(1, dtype=torch.float32)), None
        if flat.dtype == torch.float32 and native.enabled(flat):  # bits and l1 in one pass
            bits, l1 = native.sign_bits(flat)
            mean = l1 / n  # float64, as below; in Python floats: no tensor ops on a small one
            if not math.isfinite(mean):
                check_finite(flat, self.name)  # NaN/Inf in the input (raises)
            scale = ctypes.c_float(mean).value  # rounded to float32 to nearest, as .float()
            if not math.isfinite(scale):
                raise OverflowError(f"{self.name}: mean |x| exceeds the float32 range")
            return (bits, float32s(scale)), None
        else:
            bits = sign_bits(flat)
            # the l1 norm summed in float64 on the CPU, as the kernel does (so both paths give
            # the same scale, and no float32 sum overflows); in float32 elsewhere (fast there)
            wide = torch.float64 if flat.is_cpu else torch.float32
            mean = flat.to(dtype=wide).abs().sum() / n
            if not torch.isfinite(mean) and wide == torch.float32:
                check_finite(flat, self.name)  # NaN/Inf in the input; else the sum overflowed
                mean = flat.double().abs().sum() / n
        if not torch.isfinite(mean):
            check_finite(flat, self.name)  # NaN/Inf in the input (raises)
        scale = mean.float()
        if not torch.isfinite(scale):
            raise OverflowError(f"{self.name}: mean |x| exceeds the float32 range")
        return (bits, scale.reshape(1).to(flat.device)), None

    def decode(self, payload, ctx, numel, dtype):
        bits, scale = payload
        if scale.is_cpu:  # +-scale read once (a float32 value: exact as a Python float)
            out = signs_from_bits(bits, numel, scale.item())
            return out if dtype is torch.float32 else out.to(dtype=dtype)
        return signs_from_bits(bits, numel, scale.float()).to(dtype=dtype)  # +-scale

    def subtract_decompressed_(self, payload, ctx, out):
        shape, dtype, _ = ctx
        payload = self.check_payload(payload, ctx)
        if dtype == out.dtype == torch.float32 and out.is_contiguous() and native.enabled(out):
            bits, scale = payload  # out -= +-scale in one pass (kernels.c), the same values
            if scale.is_cpu and bits.is_contiguous():
                s = scale.item()
                native.expand_pair(bits, out.numel(), -s, s, out=out.view(-1), subtract=True)
                return out
            s = scale.float().reshape(())
            native.expand_bits(bits, out.numel(), max(out.numel(), 1), torch.stack([-s, s]),
                               out=out.view(-1), subtract=True)
            return out
        return super().subtract_decompressed_(payload, ctx, out)


@register("efsgd")
class EFSGD(ErrorFeedback):
    """EF-SGD with the scaled sign: ``ErrorFeedback(ScaledSign())``."""

    def __init__(self, seed: int = 0):
        super().__init__(ScaledSign(seed=seed))
        self.name = "efsgd"
