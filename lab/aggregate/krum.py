"""Krum and Multi-Krum.

Blanchard, El Mhamdi, Guerraoui, Stainer, "Machine learning with adversaries: Byzantine
tolerant gradient descent", NeurIPS 2017. With n vectors of which f may be Byzantine
(n > 2f + 2), each vector V_i is scored by the sum of squared distances to its n - f - 2
closest other vectors (Section 4, the definition of Krum):

    score(i) = sum_{i -> j} || V_i - V_j ||^2

Krum returns the vector with the lowest score; Multi-Krum (Section 5) averages the m vectors
with the lowest scores (m = n - f by default; m = 1 is Krum). Pairwise distances come from the
Gram matrix: O(n^2 d) work. Ties go to the lowest rank. Non-finite vectors are dropped first
and count against f (:mod:`lab.aggregate.robust`).
"""
from __future__ import annotations

import torch

from ..argspec import Arg, takes
from .base import LAYERWISE, register
from .robust import F, RobustAggregator, check_f, whole


def krum_scores(vectors: torch.Tensor, f: int) -> torch.Tensor:
    """score(i): the sum of the n - f - 2 smallest squared distances from row i to the others."""
    n = vectors.shape[0]
    v = vectors.double()
    sq = (v * v).sum(dim=1)
    dist = (sq[:, None] + sq[None, :] - 2 * v @ v.T).clamp_min(0)
    dist.fill_diagonal_(float("inf"))  # a vector is not its own neighbour
    return dist.sort(dim=1).values[:, : n - f - 2].sum(dim=1)


@register("multikrum")
@takes(f=F, m=Arg(int, ge=1, none=True, help="vectors averaged (None: n - f)"), layerwise=LAYERWISE,
       rule=whole)
class MultiKrum(RobustAggregator):
    name = "multikrum"

    def __init__(self, comm, f: int = 1, m: int | None = None, layerwise: bool = False):
        self.f, self.m = f, m
        super().__init__(comm, layerwise)

    @classmethod
    def check_world(cls, n: int, f: int, m: int | None) -> None:
        if not n > 2 * f + 2:
            raise ValueError(f"{cls.name} needs workers n > 2f + 2: n={n}, f={f} "
                             f"(lower aggregator_kw f or add workers)")
        if m is not None and m > n - f:
            raise ValueError(f"{cls.name}: m={m} must be <= n - f = {n - f}")

    @classmethod
    def check(cls, cfg, workers):
        super().check(cfg, workers)
        kw = cfg.aggregator_kw
        cls.check_world(workers, check_f(cls.name, kw.get("f", 1)), kw.get("m"))

    def selected(self, vectors: torch.Tensor, dropped: int) -> torch.Tensor:
        """Indices of the rows the rule keeps, best first."""
        n = vectors.shape[0]
        f = max(self.f - dropped, 0)
        self.check_world(n, f, None)
        m = (n - f) if self.m is None else min(self.m, n - f)
        scores = krum_scores(vectors, f)
        return torch.sort(scores, stable=True).indices[:m]

    def rule(self, vectors, dropped):
        return vectors[self.selected(vectors, dropped)].mean(dim=0)


@register("krum")
@takes(f=F, layerwise=LAYERWISE, rule=whole)
class Krum(MultiKrum):
    name = "krum"

    def __init__(self, comm, f: int = 1, layerwise: bool = False):
        super().__init__(comm, f=f, m=1, layerwise=layerwise)

    @classmethod
    def check(cls, cfg, workers):
        super().check(cfg, workers)
        cls.check_world(workers, check_f(cls.name, cfg.aggregator_kw.get("f", 1)), None)
