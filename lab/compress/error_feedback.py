"""Error feedback (memory) around any compressor.

Seide et al., "1-Bit Stochastic Gradient Descent and its Application to Data-Parallel
Distributed Training of Speech DNNs", Interspeech 2014 (first use); analysed by Karimireddy et
al., "Error Feedback Fixes SignSGD and other Gradient Compression Schemes", ICML 2019 (Alg. 2).

With residual ``e`` (starting at zero, never uninitialised memory):

    p = g + e,    payload = C(p),    e_new = p - D(C(p))

so ``g + e_old = D(C(g + e_old)) + e_new`` holds exactly: nothing the compressor drops is lost,
it is only delayed.
"""
from __future__ import annotations

from typing import Any

import torch

from ..argspec import Arg, takes
from .base import Compressor, check_finite, make, register


@register("ef")
@takes(inner=Arg((Compressor, str), help="the codec wrapped: a Compressor or a registered name"))
class ErrorFeedback(Compressor):
    """Wraps ``inner`` (a Compressor or a registered name) with a per-``key`` residual;
    ``inner_kw`` are the arguments of a codec given by name (``inner="topk", density=0.01``)."""

    name = "ef"
    stateful = True

    def __init__(self, inner: Compressor | str = "fp16", **inner_kw):
        if inner_kw and not isinstance(inner, str):
            raise TypeError(f"ef: keyword arguments {sorted(inner_kw)} are for a codec made by "
                            f"name (inner='topk', density=0.01); inner is already a "
                            f"{type(inner).__name__}")
        self.inner = make(inner, **inner_kw) if isinstance(inner, str) else inner
        self.residuals: dict[Any, torch.Tensor] = {}
        self.name = f"ef({self.inner.name})"
        # EF keeps a private residual, so the sum of payloads no longer decodes to the sum of
        # inputs, but it still decodes to the sum of what each rank *sent*: the inner codec's
        # compatibility carries over.
        self.allreduce_compatible = self.inner.allreduce_compatible
        self.shared_randomness = self.inner.shared_randomness
        self.fixed_size = self.inner.fixed_size
        super().__init__(seed=self.inner.seed)

    def bind(self, rank: int, world_size: int) -> "ErrorFeedback":
        self.inner.bind(rank, world_size)
        self.rank, self.world_size = rank, world_size
        return self

    def compress(self, tensor: torch.Tensor, key: Any = None):
        if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
            return self.inner.compress(tensor, key)  # the inner codec names the bad input
        e = self.residuals.get(key)
        # the whole step in one fused pass where the codec has one (the scaled sign): it
        # writes over e only once it knows p finite, so e stays valid on a refusal there too
        step = self.inner.feedback_step(tensor, e)
        if step is not None:
            payload, ctx, self.residuals[key] = step
            return payload, ctx
        if e is not None and e.shape != tensor.shape:
            e = None
        # the residual lives in fp32 even for fp16/bf16 gradients: the small errors it keeps
        # are exactly what a half-precision buffer would round away. p = g + e goes to a new
        # buffer, so e stays valid if the inner codec refuses p (every codec refuses NaN/Inf,
        # and p holds them exactly when g does, or when the sum overflows); e_new = p - D(C(p))
        # is then computed in p's buffer.
        if e is None:
            p = tensor.detach().to(torch.float32, copy=True)
        else:
            p = torch.add(e, tensor.detach())
        try:
            payload, ctx = self.inner.compress(p.to(tensor.dtype), key)
        except FloatingPointError:
            check_finite(tensor, self.name)  # name this codec when g itself holds NaN/Inf
            raise  # else g + e overflowed
        if any(_shares_memory(t, p) for t in payload):  # e.g. the identity codec
            # a fresh buffer: the payload stays intact
            self.residuals[key] = p - self.inner.decompress(payload, ctx).float()
        else:
            self.residuals[key] = self.inner.subtract_decompressed_(payload, ctx, p)
        return payload, ctx

    @property
    def wire(self):
        """The inner codec's wire format (error feedback adds nothing to the payload)."""
        return self.inner.wire

    def check_payload(self, payload, ctx) -> tuple:
        return self.inner.check_payload(payload, ctx)

    def decompress(self, payload, ctx) -> torch.Tensor:
        return self.inner.decompress(payload, ctx)

    def decompress_into(self, payload, ctx, out: torch.Tensor) -> torch.Tensor:
        return self.inner.decompress_into(payload, ctx, out)

    def subtract_decompressed_(self, payload, ctx, out: torch.Tensor) -> torch.Tensor:
        return self.inner.subtract_decompressed_(payload, ctx, out)

    def residual(self, key: Any = None) -> torch.Tensor | None:
        """A copy of the residual of ``key`` (the buffer itself is updated in place)."""
        e = self.residuals.get(key)
        return None if e is None else e.clone()

    def __repr__(self) -> str:
        return f"ErrorFeedback({self.inner!r})"


def _shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.device == b.device and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
