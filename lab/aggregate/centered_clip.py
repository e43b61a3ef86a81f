"""Centered clipping.

Karimireddy, He, Jaggi, "Learning from history for Byzantine robust optimization", ICML 2021
(Eq. 2): starting from the previous step's aggregate v_0, iterate L times

    v_{l+1} = v_l + (1/n) sum_i (x_i - v_l) * min(1, tau / ||x_i - v_l||)

so no single vector can move the result by more than tau / n per iteration. The paper applies
it to worker momenta; here it is applied to the gradients the workers send, and any momentum
is the optimizer's, after aggregation (our reading for this loop). The first step starts from
v_0 = 0. Non-finite vectors are dropped first (:mod:`lab.aggregate.robust`).
"""
from __future__ import annotations

import torch

from .base import register
from .robust import RobustAggregator


@register("centered_clip")
class CenteredClip(RobustAggregator):
    name = "centered_clip"

    def __init__(self, comm, tau: float = 1.0, iters: int = 1, layerwise: bool = False):
        if isinstance(tau, bool) or not isinstance(tau, (int, float)) or not tau > 0:
            raise ValueError(f"centered_clip: tau must be a number > 0, got {tau!r}")
        if isinstance(iters, bool) or not isinstance(iters, int) or iters < 1:
            raise ValueError(f"centered_clip: iters must be an int >= 1, got {iters!r}")
        super().__init__(comm, layerwise)
        self.tau, self.iters, self.previous = float(tau), iters, None

    def rule(self, vectors, dropped):
        v = torch.zeros_like(vectors[0]) if self.previous is None else self.previous.clone()
        for _ in range(self.iters):
            diff = vectors - v
            norms = diff.norm(dim=1, keepdim=True)
            scale = (self.tau / norms.clamp_min(1e-12)).clamp(max=1.0)
            v = v + (diff * scale).mean(dim=0)
        self.previous = v
        return v
