"""Baseline codecs: no compression (fp32 as is) and half-precision casts (fp16, bf16).

These are the fair baselines every compressor is measured against (Agarwal et al., "On the
Utility of Gradient Compression in Distributed Training Systems", MLSys 2022). All three are
allreduce-compatible: the sum of casts is (up to rounding) the cast of the sum.
"""
from __future__ import annotations

import torch

from .base import Compressor, register

_FP16_MAX = torch.finfo(torch.float16).max


class _Cast(Compressor):
    fixed_size = True
    allreduce_compatible = True
    wire_dtype: torch.dtype | None = None  # None: send in the input's own dtype

    def encode(self, flat, key):
        if self.wire_dtype is None:
            return (flat.clone(),), None
        return (flat.to(self.wire_dtype),), None

    def decode(self, payload, ctx, numel, dtype):
        return payload[0].to(dtype)

    def __repr__(self):
        return f"{type(self).__name__}()"


@register("none")
class NoCompression(_Cast):
    """Send the tensor unchanged (fp32 allreduce is the usual baseline)."""
    name = "none"


@register("fp16")
class FP16(_Cast):
    """IEEE half precision: 2 bytes per value; values beyond +-65504 would overflow to Inf."""
    name = "fp16"
    wire_dtype = torch.float16

    def encode(self, flat, key):
        if flat.numel() and flat.abs().max() > _FP16_MAX:
            raise OverflowError(f"fp16: |value| up to {flat.abs().max().item():.3g} exceeds the "
                                f"fp16 range {_FP16_MAX}; scale the tensor or use bf16")
        return super().encode(flat, key)


@register("bf16")
class BF16(_Cast):
    """bfloat16: fp32's range with 8 bits of mantissa; 2 bytes per value."""
    name = "bf16"
    wire_dtype = torch.bfloat16
