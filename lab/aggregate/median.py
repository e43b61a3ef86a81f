"""Coordinate-wise median.

Yin, Chen, Ramchandran, Bartlett, "Byzantine-robust distributed learning: towards optimal
statistical rates", ICML 2018 (Option I of Algorithm 1): each coordinate of the update is the
median of that coordinate over the workers. For an even number of vectors we take the mean
of the two middle values (numpy's definition; torch.median would return the lower one).
Non-finite vectors are dropped first (:mod:`lab.aggregate.robust`).
"""
from __future__ import annotations

from .base import register
from .robust import RobustAggregator


@register("median")
class Median(RobustAggregator):
    name = "median"

    def __init__(self, comm, layerwise: bool = False):
        super().__init__(comm, layerwise)

    def rule(self, vectors, dropped):
        s, n = vectors.sort(dim=0).values, vectors.shape[0]
        return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
