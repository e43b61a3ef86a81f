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

from .base import Compressor, check_finite, make, register


@register("ef")
class ErrorFeedback(Compressor):
    """Wraps ``inner`` (a Compressor or a registered name) with a per-``key`` residual."""

    name = "ef"
    stateful = True

    def __init__(self, inner: Compressor | str = "fp16", **inner_kw):
        self.inner = make(inner, **inner_kw) if isinstance(inner, str) else inner
        if not isinstance(self.inner, Compressor):
            raise TypeError(f"inner must be a Compressor or a registered name, got {inner!r}")
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
        check_finite(tensor, self.name)  # before the residual absorbs it
        e = self.residuals.get(key)
        if e is None or e.shape != tensor.shape:
            e = torch.zeros(tensor.shape, dtype=torch.float32, device=tensor.device)
        # the residual lives in fp32 even for fp16/bf16 gradients: the small errors it keeps
        # are exactly what a half-precision buffer would round away. p = g + e and then
        # e_new = p - D(C(p)) are computed in e's own buffer: two passes instead of two
        # passes plus two fresh gradient-sized tensors (the same values: + is commutative).
        p = e.add_(tensor)
        try:
            payload, ctx = self.inner.compress(p.to(tensor.dtype), key)
        except Exception:
            self.residuals.pop(key, None)  # p no longer holds a valid residual
            raise
        sent = self.inner.decompress(payload, ctx)
        if any(_shares_memory(t, p) for t in (*payload, sent)):  # e.g. the identity codec
            self.residuals[key] = p - sent.float()  # a fresh buffer: the payload stays intact
        else:
            self.residuals[key] = p.sub_(sent)
        return payload, ctx

    def decompress(self, payload, ctx) -> torch.Tensor:
        return self.inner.decompress(payload, ctx)

    def decompress_into(self, payload, ctx, out: torch.Tensor) -> torch.Tensor:
        return self.inner.decompress_into(payload, ctx, out)

    def residual(self, key: Any = None) -> torch.Tensor | None:
        """A copy of the residual of ``key`` (the buffer itself is updated in place)."""
        e = self.residuals.get(key)
        return None if e is None else e.clone()

    def __repr__(self) -> str:
        return f"ErrorFeedback({self.inner!r})"


def _shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.device == b.device and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
