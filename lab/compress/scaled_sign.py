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

import torch

from .base import Compressor, check_finite, register
from .error_feedback import ErrorFeedback
from .sign import sign_bits, signs_from_bits


@register("scaled_sign")
class ScaledSign(Compressor):
    """``(||x||_1 / d) * sign(x)``: the sign, rescaled so that its l1 norm equals x's."""
    fixed_size = True
    checks_finite = True  # through its l1 norm

    name = "scaled_sign"

    def encode(self, flat, key):
        n = flat.numel()
        # compute the l1 norm in float32 so fp16/bf16 inputs neither overflow nor lose digits
        scale = flat.float().abs().sum() / n if n else flat.new_zeros((), dtype=torch.float32)
        if not torch.isfinite(scale):
            check_finite(flat, self.name)  # NaN/Inf in the input; else the sum overflowed
            scale = (flat.double().abs().sum() / n).float()
            if not torch.isfinite(scale):
                raise OverflowError(f"{self.name}: mean |x| exceeds the float32 range")
        return (sign_bits(flat), scale.reshape(1).to(torch.float32)), None

    def decode(self, payload, ctx, numel, dtype):
        bits, scale = payload
        return signs_from_bits(bits, numel, scale.float()).to(dtype)  # +-scale


@register("efsgd")
class EFSGD(ErrorFeedback):
    """EF-SGD with the scaled sign: ``ErrorFeedback(ScaledSign())``."""

    def __init__(self, seed: int = 0):
        super().__init__(ScaledSign(seed=seed))
        self.name = "efsgd"
