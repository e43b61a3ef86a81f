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

from ..argspec import SEED, takes
from . import device, native, native_small
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

    def encode_plain(self, x, key):
        # as encode's C path does; NaN/Inf and overflow take the general route
        n = x.numel()
        if n:
            bits = native_small.BYTES.new_empty((n + 7) // 8)
            mean = native_small.K.lab_sign_bits(x.data_ptr(), n, bits.data_ptr(), 1) / n
            scale = native_small.f32(mean) if math.isfinite(mean) else math.inf
            if math.isfinite(scale):
                return (bits, float32s(scale)), None
        return None

    def decode_plain(self, payload, n):
        # ceil(n / 8) sign bytes and one finite scale >= 0
        got = native_small.parts(payload, (torch.uint8, (n + 7) // 8), (torch.float32, 1))
        if got is not None:
            bits, scale = got
            s = scale.item()
            if math.isfinite(s) and s >= 0:
                return native_small.expand_pair(bits, n, -s, s)
        return None

    def feedback_step(self, tensor, residual):
        """Error feedback's step in one C call (:class:`~lab.compress.ErrorFeedback`): ``p =
        tensor + residual`` (a copy of tensor where residual is None), its payload, and the new
        residual ``p - decompress(payload)`` written over the old one in place (a new buffer on
        the first call), with the values of the general route. None where it does not apply
        (another dtype or device, NaN/Inf, overflow), with nothing changed."""
        n = tensor.numel() if native_small.plain(tensor) else 0
        # in place, the residual must never be half written: the kernel checks tensor +
        # residual finite first, and then mean |p| <= max |p| rounds to a finite scale while
        # its float64 sum errs by less than n 2^-53 < 2^-24 (n < 2^29)
        if not 0 < n < 2 ** 29:
            return None
        vector = tensor.dim() == 1
        if residual is not None and not (residual.dim() == 1 and residual.numel() == n
                                         if vector else residual.shape == tensor.shape):
            residual = None  # another shape: error feedback starts afresh, as it does below
        if residual is not None and not native_small.same(residual, tensor):
            return None
        p = residual
        if p is None:
            p = native_small.FLOATS.new_empty(n)
            p = p if vector else p.view(tensor.shape)
        bits = native_small.BYTES.new_empty((n + 7) // 8)
        scale = native_small.FLOATS.new_empty(1)
        mean = native_small.K.lab_ef_scaled_sign(
            tensor.data_ptr(), None if residual is None else p.data_ptr(), n, p.data_ptr(),
            bits.data_ptr(), scale.data_ptr())
        if not (math.isfinite(mean) and math.isfinite(native_small.f32(mean))):
            return None  # the general route raises (NaN/Inf in tensor + residual, overflow)
        return (bits, scale), (tensor.shape, torch.float32, None), p

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
        elif flat.dtype == torch.float32 and device.usable(flat):  # bits and l1, one kernel
            bits, l1 = device.sign_bits_l1(flat)
            mean = l1 / n
            if not torch.isfinite(mean):
                check_finite(flat, self.name)  # NaN/Inf in the input; else the sum overflowed
                mean = flat.double().abs().sum() / n
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
@takes(seed=SEED)
class EFSGD(ErrorFeedback):
    """EF-SGD with the scaled sign: ``ErrorFeedback(ScaledSign())``."""

    name = "efsgd"

    def __init__(self, seed: int = 0):
        super().__init__(ScaledSign(seed=seed))
        self.name = "efsgd"
