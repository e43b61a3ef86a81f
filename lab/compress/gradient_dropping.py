"""Gradient dropping: drop the R% smallest entries by magnitude, keep them locally.

Aji & Heafield, "Sparse Communication for Distributed Gradient Descent", EMNLP 2017,
Sec. 3 and Algorithm 1: add the locally accumulated residual to the gradient, find the
threshold below which R% of the absolute values lie (R = 99% in the paper), send the entries
at or above it, and keep the dropped ones as the new residual. The threshold comes from a
sample (0.1% of the entries in the paper) instead of a full sort, so the number sent is
about (1 - R) n, not exactly: the payload is ragged.

``"drop"`` is the bare selection (biased, no memory); ``"gradient_dropping"`` is the method
as published, ``ErrorFeedback(Drop(...))``. The paper's optional extra step of quantizing the
kept values (1-bit with per-sign means) is not done here: the 1-bit codecs cover it.
Payload ``(values, int32 indices)`` as :class:`~lab.compress.topk.TopK`.
"""
from __future__ import annotations

import torch

from ..argspec import Arg, SEED, takes
from .base import register
from .error_feedback import ErrorFeedback
from .topk import LEAST_SAMPLE, SAMPLE, SparseCodec, candidates, sampled_threshold, sparse_payload

DROP = dict(drop_ratio=Arg(float, gt=0, lt=1, help="fraction of the values not sent"),
            sample=SAMPLE, min_sample=LEAST_SAMPLE)


@register("drop")
@takes(**DROP)
class Drop(SparseCodec):
    """Send ``|x| >= thr`` where ``thr`` leaves ``drop_ratio`` of a ``sample`` below it."""

    name = "drop"

    def __init__(self, drop_ratio: float = 0.99, sample: float = 0.001, min_sample: int = 1000,
                 seed: int = 0):
        self.drop_ratio, self.sample, self.min_sample = float(drop_ratio), sample, min_sample
        super().__init__(seed=seed)

    def encode(self, flat, key):
        if flat.numel() == 0:
            idx = torch.empty(0, dtype=torch.int64)
        else:
            keep = 1.0 - self.drop_ratio
            thr = sampled_threshold(flat, keep, self.sample, self.generator_for(flat.device),
                                    self.min_sample)
            # mostly-zero tensors give thr = 0: never send exact zeros
            thr = thr.clamp_min(torch.finfo(flat.dtype).tiny)
            idx = candidates(flat, thr, keep)
        return sparse_payload(flat, idx), None

    def __repr__(self):
        return f"Drop(drop_ratio={self.drop_ratio}, sample={self.sample})"


@register("gradient_dropping")
@takes(**DROP, seed=SEED)
def gradient_dropping(drop_ratio: float = 0.99, sample: float = 0.001, min_sample: int = 1000,
                      seed: int = 0) -> ErrorFeedback:
    """Aji & Heafield (2017) as published: :class:`Drop` plus local residual accumulation."""
    ef = ErrorFeedback(Drop(drop_ratio, sample, min_sample, seed))
    ef.name = "gradient_dropping"
    return ef
