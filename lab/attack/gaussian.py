"""Large Gaussian noise: a Byzantine worker sends N(0, sigma^2) in every coordinate instead of
its gradient (the "Gaussian Byzantine" of Blanchard et al., NeurIPS 2017, Section 6).
The noise comes from a generator seeded by (seed, rank), so runs repeat exactly."""
from __future__ import annotations

import torch

from ..argspec import Arg, takes
from .base import Attack, register


@register("gaussian")
@takes(byzantine=Arg(bool), sigma=Arg(float, gt=0, help="standard deviation of the noise sent"))
class Gaussian(Attack):
    name = "gaussian"

    def __init__(self, engine, byzantine, sigma: float = 100.0):
        super().__init__(engine, byzantine)
        self.sigma = float(sigma)
        self.gen = torch.Generator().manual_seed(engine.cfg.seed * 7919 + engine.rank)

    def on_gradient(self, grads, step):
        if not self.byzantine:
            return grads
        return [(torch.randn(g.shape, generator=self.gen) * self.sigma).to(g.device, g.dtype)
                for g in grads]
