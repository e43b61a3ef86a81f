"""Baseline codecs: no compression (fp32 as is) and half-precision casts (fp16, bf16).

These are the fair baselines every compressor is measured against (Agarwal et al., "On the
Utility of Gradient Compression in Distributed Training Systems", MLSys 2022). All three are
allreduce-compatible: the sum of casts is (up to rounding) the cast of the sum.
"""
from __future__ import annotations

import torch

from . import device, native
from .base import Compressor, Part, WireFormat, all_finite, check_finite, register


class _Cast(Compressor):
    fixed_size = True
    allreduce_compatible = True
    wire_dtype: torch.dtype | None = None  # None: send in the input's own dtype

    def compress(self, tensor, key=None):
        if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
            return super().compress(tensor, key)  # the base class checks (and names) bad input
        # Speed: a cast carries NaN and Inf along (and turns overflow into Inf), so checking
        # the *output* replaces the base class's pass over the input: in the same pass as the
        # cast (or copy) in the C kernel, else by one min/max over the half-size output.
        if tensor.dtype is torch.float32 and tensor.dim() == 1 and tensor.is_contiguous() \
                and native.enabled(tensor):  # the common case, with no wrapper (~1 us less)
            n = tensor.numel()
            wire = torch.empty(n, dtype=self.wire_dtype or torch.float32)
            bad = native.cast_function()(tensor.data_ptr(), n, self._mode, wire.data_ptr())
            if bad == 0:
                return (wire,), (tensor.shape, torch.float32, None)
        flat = tensor if tensor.dim() == 1 else tensor.detach().reshape(-1)
        fast = native.cast(flat, self.wire_dtype or flat.dtype) \
            if flat.dtype is torch.float32 and native.enabled(flat) else None
        if fast is not None:
            wire, finite = fast
        elif self.wire_dtype is None:
            return super().compress(tensor, key)  # a check, then a copy
        elif flat.dtype is torch.float32 and device.usable(flat):  # cast and check, one kernel
            wire, finite = device.cast_checked(flat.detach(), self.wire_dtype)
            finite = bool(finite)
        else:
            wire = flat.detach().to(self.wire_dtype)
            finite = not wire.numel() or all_finite(*torch.aminmax(wire))
        if not finite:
            check_finite(tensor, self.name)  # raises if the input itself holds NaN/Inf
            big = tensor.detach().abs().max().item()
            raise OverflowError(f"{self.name}: |value| up to {big:.3g} exceeds the range of "
                                f"{self.wire_dtype} ({torch.finfo(self.wire_dtype).max:.5g});"
                                f" scale the tensor{' or use bf16' if self.name == 'fp16' else ''}")
        return (wire,), (tensor.shape, tensor.dtype, None)

    def encode(self, flat, key):
        return (flat.clone() if self.wire_dtype is None else flat.to(self.wire_dtype),), None

    def decode(self, payload, ctx, numel, dtype):
        return payload[0].to(dtype=dtype)

    def decompress(self, payload, ctx):
        # Speed (issue 31: < 10 us a call on small tensors): the one-part payload that the
        # declared format accepts is recognised inline; anything else goes through the full
        # check, which names what is wrong.
        shape, dtype, _ = ctx
        t = payload[0] if payload.__class__ is tuple and len(payload) == 1 else None
        if t.__class__ is not torch.Tensor or t.dtype is not (self.wire_dtype or dtype) \
                or t.numel() != shape.numel():
            t = self.check_payload(payload, ctx)[0]
        out = t.to(dtype=dtype)  # the keyword form: ~1.3 us less than .to(dtype) to parse
        return out if out.shape == shape else out.view(shape)

    def decompress_into(self, payload, ctx, out):
        payload = self.check_payload(payload, ctx)
        return out.copy_(payload[0].reshape(out.shape))  # the cast back happens in the copy

    def __repr__(self):
        return f"{type(self).__name__}()"


@register("none")
class NoCompression(_Cast):
    """Send the tensor unchanged (fp32 allreduce is the usual baseline)."""
    name = "none"
    _mode = 0  # lab_cast's mode
    wire = WireFormat(Part("values", "input", "n"))


@register("fp16")
class FP16(_Cast):
    """IEEE half precision: 2 bytes per value; values beyond +-65504 (that would round to Inf)
    are refused with an OverflowError."""
    name = "fp16"
    _mode = 1  # lab_cast's mode
    wire_dtype = torch.float16
    wire = WireFormat(Part("values", torch.float16, "n"))


@register("bf16")
class BF16(_Cast):
    """bfloat16: fp32's range with 8 bits of mantissa; 2 bytes per value."""
    name = "bf16"
    _mode = 2  # lab_cast's mode
    wire_dtype = torch.bfloat16
    wire = WireFormat(Part("values", torch.bfloat16, "n"))
