"""Coordinate-wise trimmed mean.

Yin, Chen, Ramchandran, Bartlett, ICML 2018 (Option II of Algorithm 1, beta-trimmed mean):
for each coordinate, drop the f largest and the f smallest values over the workers and
average the remaining n - 2f. Needs n > 2f. Non-finite vectors are dropped first and count
against f (:mod:`lab.aggregate.robust`).
"""
from __future__ import annotations

from ..argspec import takes
from .base import LAYERWISE, register
from .robust import F, RobustAggregator, check_f, whole


@register("trimmed_mean")
@takes(f=F, layerwise=LAYERWISE, rule=whole)
class TrimmedMean(RobustAggregator):
    name = "trimmed_mean"

    def __init__(self, comm, f: int = 1, layerwise: bool = False):
        self.f = f
        super().__init__(comm, layerwise)

    @classmethod
    def check_world(cls, n, f):
        if not n > 2 * f:
            raise ValueError(f"{cls.name} needs workers n > 2f: n={n}, f={f}")

    @classmethod
    def check(cls, cfg, workers):
        super().check(cfg, workers)
        cls.check_world(workers, check_f(cls.name, cfg.aggregator_kw.get("f", 1)))

    def rule(self, vectors, dropped):
        n, f = vectors.shape[0], max(self.f - dropped, 0)
        self.check_world(n, f)
        s = vectors.sort(dim=0).values
        return s[f:n - f].mean(dim=0)
