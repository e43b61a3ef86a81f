"""Approximate Top-k from a sampled threshold (hierarchical selection).

Lin, Han, Mao, Wang, Dally, "Deep Gradient Compression", ICLR 2018, Sec. 5 (system
performance): "sample only 0.1% to 1% of the gradients and perform top-k selection on the
samples to estimate the threshold for the entire population. If the number of gradients
exceeding the threshold is far more than expected, a precise threshold is calculated from the
already-selected gradients."

Here: draw ``s = max(min_sample, ceil(sample * n))`` positions uniformly (with replacement, a
sample only estimates a quantile), take the ``round(overshoot * d * s)``-th largest sampled
magnitude as the threshold, select ``|x| >= thr`` in one pass, and if more than ``k`` pass,
keep the exact top-k *among the selected* (cheap: the candidate set is small). The
``overshoot`` (> 1) lowers the threshold on purpose so that the candidates almost always
contain the true top-k: then the result is exact. When fewer than ``k`` pass (an unlucky
sample) the payload is ragged, smaller than ``k`` (the allgather path allows that). The exact
``"topk"`` codec takes the same route but falls back to a full ``torch.topk`` in that
case; this codec never does, so its cost is bounded by one pass plus a small top-k.
"""
from __future__ import annotations

import torch

from ..argspec import Arg, takes
from .base import Part, WireFormat, register
from .topk import (DENSITY, KEPT, LEAST_SAMPLE, SAMPLE, SparseCodec, candidates_topk, resolve_k,
                   sampled_threshold, sparse_payload, topk_indices)


#: the default least sample; a tensor of at most this many values gets the exact Top-k
MIN_SAMPLE = 1000


def sampled_topk_indices(x: torch.Tensor, k: int, generator: torch.Generator,
                         sample: float = 0.01, overshoot: float = 2.0,
                         min_sample: int = MIN_SAMPLE) -> torch.Tensor:
    """At most ``k`` indices, almost always those of the exact top-k of ``|x|``."""
    n = x.numel()
    if k >= n or n <= min_sample:  # small tensors: the exact answer is as cheap
        return topk_indices(x, k)
    frac = overshoot * k / n
    thr = sampled_threshold(x, frac, sample, generator, min_sample)
    return candidates_topk(x, k, thr, frac)  # no fallback: fewer than k is accepted (ragged)


@register("topk_sampled")
@takes(density=DENSITY, k=KEPT, sample=SAMPLE, min_sample=LEAST_SAMPLE,
       overshoot=Arg(float, ge=1, help="sampled quantile aims at overshoot x k candidates"))
class SampledTopK(SparseCodec):
    """Top-k through a threshold estimated on a ``sample`` fraction (default 1%) of entries.

    ``overshoot`` scales the sampled quantile (2.0: aim at 2k candidates, then trim to k).
    Payload and ctx as :class:`~lab.compress.topk.TopK`; the count may be below k.
    """

    name = "topk_sampled"
    wire = WireFormat(Part("values", "input", "c"), Part("indices", "index", "c", "0..n - 1"),
                      counts={"c": "0..k"},
                      where={"k": "floor(density * n + 1/2) clamped to [1, n], or k given"})

    def __init__(self, density: float = 0.01, k: int | None = None, sample: float = 0.01,
                 overshoot: float = 2.0, min_sample: int = 1000, seed: int = 0):
        self.density, self.k, self.sample = density, k, sample
        self.overshoot, self.min_sample = overshoot, min_sample
        super().__init__(seed=seed)

    def encode(self, flat, key):
        k = resolve_k(flat.numel(), self.density, self.k)
        idx = sampled_topk_indices(flat, k, self.generator_for(flat.device), self.sample,
                                   self.overshoot, self.min_sample)
        return sparse_payload(flat, idx), None

    def __repr__(self):
        arg = f"k={self.k}" if self.k is not None else f"density={self.density}"
        return f"SampledTopK({arg}, sample={self.sample})"
