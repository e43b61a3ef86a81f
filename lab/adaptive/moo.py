"""Choosing the density online as a two-objective problem (Tyagi & Swany, BigData 2023, Sec. III-C).

For candidate densities ``d`` the paper minimises together

- f1(d): the modeled communication time of a step at density d (the cheapest collective of
  :mod:`.switching` at the current network), and
- f2(d) = 1 / gamma(d), the inverse of the compression gain
  ``gamma(d) = ||top_{dN}(g + e)|| / ||g + e||``, smoothed over steps and averaged over ranks.

The paper finds the Pareto front with NSGA-II; with a handful of candidates an exact search
over the grid finds the same front, so we do that. One point of the front is chosen by
weights (0.6 on time, 0.4 on gain) after dividing each objective by its largest value over
the candidates (our reading: the paper does not state the normalisation; dividing by the
maximum keeps tiny differences tiny, unlike min-max scaling).
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch

from ..compress.topk import check_density, resolve_k
from .switching import choose, exchange_costs


def compression_gains(acc: torch.Tensor, ks: Sequence[int]) -> list[float]:
    """``||top_k(acc)|| / ||acc||`` for each k, from one sort of the largest max(ks) entries."""
    total = float(acc.norm())
    if total == 0:
        return [1.0] * len(ks)  # nothing to lose
    top = torch.topk(acc.abs().float(), max(ks), sorted=True).values
    kept = top.square().cumsum(0).sqrt()
    return [min(1.0, float(kept[k - 1]) / total) for k in ks]


def pareto_front(f1: Sequence[float], f2: Sequence[float]) -> list[bool]:
    """``front[i]`` is True if no other point is at least as good in both objectives and
    strictly better in one (both objectives minimised)."""
    a, b = np.asarray(f1, float), np.asarray(f2, float)
    dominated = [bool(np.any((a <= a[i]) & (b <= b[i]) & ((a < a[i]) | (b < b[i]))))
                 for i in range(len(a))]
    return [not d for d in dominated]


def weighted_choice(f1, f2, weights=(0.6, 0.4)) -> int:
    """Index of the front point with the lowest ``w1 f1/max f1 + w2 f2/max f2`` (first on ties)."""
    a, b = np.asarray(f1, float), np.asarray(f2, float)
    na = a / a.max() if a.max() > 0 else a
    nb = b / b.max() if b.max() > 0 else b
    score = weights[0] * na + weights[1] * nb
    front = pareto_front(a, b)
    return min((i for i in range(len(a)) if front[i]), key=lambda i: (score[i], i))


class DensityController:
    """The state of the online choice: smoothed gains per candidate, the density in force, and
    when to re-decide (first call, a new network, or the smoothed gain at the chosen density
    moved by more than ``shift`` relative to when it was chosen).

    Callers feed it quantities that are identical on every rank (allreduced gains, the link
    in force), so every rank takes the same decision without a broadcast.
    """

    def __init__(self, candidates: Sequence[float], weights=(0.6, 0.4), smoothing: float = 0.9,
                 shift: float = 0.1):
        if not isinstance(candidates, (list, tuple)) or not candidates:
            raise ValueError(f"candidates must be a non-empty list of densities, got {candidates!r}")
        for d in candidates:
            check_density(d, None)
        if len(weights) != 2 or min(weights) < 0 or sum(weights) <= 0:
            raise ValueError(f"weights must be two non-negative numbers, got {weights!r}")
        if not 0 <= smoothing < 1:
            raise ValueError(f"smoothing must be in [0, 1), got {smoothing!r}")
        if not shift > 0:
            raise ValueError(f"shift must be > 0, got {shift!r}")
        self.candidates = sorted(set(float(d) for d in candidates))
        self.weights, self.smoothing, self.shift = tuple(weights), float(smoothing), float(shift)
        self.gains: np.ndarray | None = None
        self.index: int | None = None
        self._decided_net, self._decided_gain = object(), math.nan
        self.last_times: list[float] = []

    def ks(self, n: int) -> list[int]:
        return [resolve_k(n, d) for d in self.candidates]

    def observe(self, gains: Sequence[float]) -> None:
        g = np.asarray(gains, float)
        if not np.all(np.isfinite(g)):
            raise FloatingPointError(f"compression gains are not finite: {g}")
        s = self.smoothing
        self.gains = g if self.gains is None else s * self.gains + (1 - s) * g

    def needs_decision(self, network) -> bool:
        if self.index is None or network != self._decided_net:
            return True
        now = self.gains[self.index]
        return abs(now - self._decided_gain) > self.shift * self._decided_gain

    def decide(self, n: int, p: int, alpha: float, beta: float, variant: str = "star",
               network=None) -> float:
        """Re-choose the density from the smoothed gains and the modeled times."""
        if self.gains is None:
            raise RuntimeError("decide() before any observe(): no gains measured yet")
        self.last_times = [min(exchange_costs(k, p, alpha, beta, variant).values())
                           for k in self.ks(n)]
        self.index = weighted_choice(self.last_times, 1.0 / np.maximum(self.gains, 1e-12),
                                     self.weights)
        self._decided_net, self._decided_gain = network, self.gains[self.index]
        return self.candidates[self.index]

    @property
    def density(self) -> float | None:
        return None if self.index is None else self.candidates[self.index]


__all__ = ["DensityController", "choose", "compression_gains", "pareto_front", "weighted_choice"]
