"""Choosing the density online as a two-objective problem (Tyagi & Swany, BigData 2023, Sec. III-C).

Over candidate densities ``d`` (the paper's "CR"; the authors' code uses 0.1, 0.033, 0.011,
0.004, 0.001) two objectives are minimised together:

- f1(d): the modeled communication time of a step at density d, in ms (the cheapest collective
  of :mod:`.switching` on the link in force; the authors' code also prices it with its model,
  ``updateCommunicationCost``), and
- f2(d) = 1 / gamma(d), the inverse of the compression gain
  ``gamma(d) = ||top_{dN}(g + e)|| / ||g + e||``, smoothed over steps and averaged over ranks.

``method="nsga2"`` (default) is the authors' procedure (``adaptive_moo/model_moo.py`` and
``optimizeMultiObjectives`` in ``adaptive_moo/run_MOOCompression.py``): scipy ``curve_fit`` of
``f1 = v2 exp(v1 d) - 1`` and of the tanh-like gain
``(e^{v1 d} - e^{-v2 d} + v5) / (e^{v3 d} + e^{-v4 d} + v6)`` through the candidates plus the
pinned points (0, 0) and (1, 1); NSGA-II (pymoo: population 40, 10 offspring, SBX 0.9/15,
PM 20, 40 generations, seed 1) over the continuous interval [min d, max d]; the front normalised
by its ideal and nadir points; the pick by the achievement scalarising function with weights
0.6 (time) / 0.4 (gain). Deviations: we fit once per decision, not once per evaluation, and
vectorise the evaluation (same result, less time); where a fit does not converge we fall back
to linear interpolation through the points (the authors' code would stop), and say so in
``last["fit"]``. :func:`exact_choice` solves the same problem by exhaustive search on a fine
grid, the cross-check. ``method="grid"`` is the lab's earlier reading: a weighted sum over the
candidate points only, each objective divided by its maximum.
"""
from __future__ import annotations

import math
import warnings
from typing import Callable, Sequence

import numpy as np
import torch

from ..compress.topk import check_density, resolve_k
from .switching import exchange_costs

#: The authors' candidate densities (``candidateCRs`` in run_MOOCompression.py).
AUTHORS_CANDIDATES = (0.1, 0.033, 0.011, 0.004, 0.001)
METHODS = ("nsga2", "grid")
#: When the density is re-chosen: ``"link"`` on a change of link only (the authors'
#: ``start_training``: NSGA-II runs when the epoch's latency or bandwidth differs from the last
#: one; until the first change the last warm-up density stays), ``"link+gain"`` also when the
#: mean smoothed gain moves by more than ``shift`` (the lab's earlier reading).
TRIGGERS = ("link+gain", "link")


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


# -- the authors' procedure ------------------------------------------------------------------
def _exp_time(x, v1, v2):
    return v2 * np.exp(v1 * x) - 1


def _tanh_gain(x, v1, v2, v3, v4, v5, v6):
    return (np.exp(v1 * x) - np.exp(-v2 * x) + v5) / (np.exp(v3 * x) + np.exp(-v4 * x) + v6)


def _fit(fn, x, y) -> tuple[Callable, bool]:
    """``fn`` fitted to (x, y) by scipy, or (if it fails, or there are fewer points than
    parameters) linear interpolation; and whether the fit converged."""
    from scipy.optimize import curve_fit
    order = np.argsort(x)
    xs, ys = np.asarray(x, float)[order], np.asarray(y, float)[order]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            params, _ = curve_fit(fn, xs, ys, maxfev=20_000)
        if np.all(np.isfinite(params)) and np.all(np.isfinite(fn(xs, *params))):
            return (lambda d: fn(np.asarray(d, float), *params)), True
    except (RuntimeError, TypeError, ValueError, OverflowError, FloatingPointError):
        pass
    return (lambda d: np.interp(d, xs, ys)), False


def fit_objectives(candidates, times_ms, gains) -> tuple[Callable, Callable, bool]:
    """The authors' fits: f1(d) (ms) and f2(d) = 1/gain(d), and whether both converged."""
    t, ok_t = _fit(_exp_time, candidates, times_ms)
    g, ok_g = _fit(_tanh_gain, list(candidates) + [1.0, 0.0], list(gains) + [1.0, 0.0])
    return t, (lambda d: 1.0 / np.clip(g(d), 1e-6, None)), ok_t and ok_g


def asf_pick(F: np.ndarray, weights=(0.6, 0.4)) -> int:
    """Row of ``F`` (points x 2 objectives) with the lowest achievement scalarising function
    after ideal/nadir normalisation (pymoo ``ASF`` with weights ``1/weights``, as the authors)."""
    from pymoo.decomposition.asf import ASF
    F = np.asarray(F, float)
    span = F.max(axis=0) - F.min(axis=0)
    nF = (F - F.min(axis=0)) / np.where(span > 0, span, 1.0)
    return int(ASF().do(nF, 1 / np.asarray(weights, float)).argmin())


def nsga2_choice(f1: Callable, f2: Callable, lo: float, hi: float, weights=(0.6, 0.4),
                 seed: int = 1) -> tuple[float, np.ndarray, np.ndarray]:
    """The authors' NSGA-II run over [lo, hi]; returns (chosen d, front X, front F)."""
    from pymoo.algorithms.moo.nsga2 import NSGA2
    from pymoo.core.problem import Problem
    from pymoo.operators.crossover.sbx import SBX
    from pymoo.operators.mutation.pm import PM
    from pymoo.operators.sampling.rnd import FloatRandomSampling
    from pymoo.optimize import minimize
    from pymoo.termination import get_termination

    class _Problem(Problem):
        def __init__(self):
            super().__init__(n_var=1, n_obj=2, xl=np.array([lo]), xu=np.array([hi]))

        def _evaluate(self, x, out, *args, **kwargs):
            out["F"] = np.column_stack([f1(x[:, 0]), f2(x[:, 0])])

    algo = NSGA2(pop_size=40, n_offsprings=10, sampling=FloatRandomSampling(),
                 crossover=SBX(prob=0.9, eta=15), mutation=PM(eta=20), eliminate_duplicates=True)
    res = minimize(_Problem(), algo, get_termination("n_gen", 40), seed=seed, verbose=False)
    X, F = np.asarray(res.X, float).reshape(-1), np.asarray(res.F, float).reshape(-1, 2)
    return float(X[asf_pick(F, weights)]), X, F


def exact_choice(f1: Callable, f2: Callable, lo: float, hi: float, weights=(0.6, 0.4),
                 points: int = 4001) -> tuple[float, np.ndarray, np.ndarray]:
    """The same problem solved by exhaustive search: the Pareto front of ``points`` evenly
    spaced densities in [lo, hi], normalised and picked as :func:`nsga2_choice` does."""
    x = np.linspace(lo, hi, points)
    F = np.column_stack([f1(x), f2(x)])
    order = np.lexsort((F[:, 1], F[:, 0]))  # by f1, then f2: one pass finds the front
    keep, best = [], math.inf
    for i in order:
        if F[i, 1] < best:
            keep.append(i)
            best = F[i, 1]
    X, F = x[keep], F[keep]
    return float(X[asf_pick(F, weights)]), X, F


class DensityController:
    """The state of the online choice: smoothed gains per candidate, the density in force, and
    when to re-decide: ``trigger="link+gain"`` (default) on the first call, a new network, or
    when the mean smoothed gain moved by more than ``shift`` relative to when it was chosen;
    ``trigger="link"`` (the authors') only when the network differs from the one the density
    in force was chosen, or held (:meth:`hold`), on.

    Callers feed it quantities that are identical on every rank (allreduced gains, the link
    in force), so every rank takes the same decision without a broadcast (NSGA-II is seeded).
    ``last`` holds the inputs and outputs of the latest decision, for plots.
    """

    def __init__(self, candidates: Sequence[float] = AUTHORS_CANDIDATES, weights=(0.6, 0.4),
                 smoothing: float = 0.9, shift: float = 0.1, method: str = "nsga2",
                 model: str = "authors", trigger: str = "link+gain"):
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
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        if trigger not in TRIGGERS:
            raise ValueError(f"trigger must be one of {TRIGGERS}, got {trigger!r}")
        self.trigger = trigger
        exchange_costs(1, 2, 0.0, 0.0, model=model)  # raises on an unknown model
        self.candidates = sorted(set(float(d) for d in candidates))
        if method == "nsga2" and len(self.candidates) < 3:
            raise ValueError(f"candidates: method='nsga2' fits curves and needs >= 3 densities, "
                             f"got {self.candidates}")
        self.weights, self.smoothing, self.shift = tuple(weights), float(smoothing), float(shift)
        self.method, self.model = method, model
        self.gains: np.ndarray | None = None
        self._density: float | None = None
        self._decided_net, self._decided_gain = object(), math.nan
        self.last: dict = {}
        self.last_times: list[float] = []

    def ks(self, n: int) -> list[int]:
        return [resolve_k(n, d) for d in self.candidates]

    def observe(self, gains: Sequence[float], fresh: bool = False) -> None:
        """Fold one measurement of the gains into the smoothed ones (``fresh``: replace them,
        as the authors' re-exploration replaces its gains)."""
        g = np.asarray(gains, float)
        if not np.all(np.isfinite(g)):
            raise FloatingPointError(f"compression gains are not finite: {g}")
        s = self.smoothing
        self.gains = g if self.gains is None or fresh else s * self.gains + (1 - s) * g

    def hold(self, density: float, network) -> None:
        """Keep ``density`` on ``network`` without deciding (the authors keep the last warm-up
        density until the link first changes)."""
        self._density, self._decided_net, self._decided_gain = float(density), network, math.nan

    def needs_decision(self, network) -> bool:
        if self._density is None or network != self._decided_net:
            return True
        if self.trigger == "link" or math.isnan(self._decided_gain):
            return False
        now = float(np.mean(self.gains))
        return abs(now - self._decided_gain) > self.shift * self._decided_gain

    def times(self, n: int, p: int, alpha: float, beta: float, variant: str = "star") -> list[float]:
        """Modeled seconds of the cheapest exchange at each candidate density."""
        return [min(exchange_costs(k, p, alpha, beta, variant, self.model).values())
                for k in self.ks(n)]

    def decide(self, n: int, p: int, alpha: float, beta: float, variant: str = "star",
               network=None) -> float:
        """Re-choose the density from the smoothed gains and the modeled times."""
        if self.gains is None:
            raise RuntimeError("decide() before any observe(): no gains measured yet")
        self.last_times = self.times(n, p, alpha, beta, variant)
        d = self.candidates
        if self.method == "grid":
            i = weighted_choice(self.last_times, 1.0 / np.maximum(self.gains, 1e-12), self.weights)
            self._density, fit = d[i], "none"
        else:
            f1, f2, ok = fit_objectives(d, 1e3 * np.asarray(self.last_times), self.gains)
            self._density = nsga2_choice(f1, f2, d[0], d[-1], self.weights)[0]
            fit = "curve_fit" if ok else "interp"
        self.last = {"times_s": list(self.last_times), "gains": [float(g) for g in self.gains],
                     "density": self._density, "fit": fit}
        self._decided_net, self._decided_gain = network, float(np.mean(self.gains))
        return self._density

    def adopt(self, density: float, n: int, p: int, alpha: float, beta: float,
              variant: str = "star", network=None) -> float:
        """Take ``density`` as decided elsewhere (the rank that ran :meth:`decide` broadcast
        it): the same state as :meth:`decide` leaves, without the fits and NSGA-II."""
        if self.gains is None:
            raise RuntimeError("adopt() before any observe(): no gains measured yet")
        if not (math.isfinite(density) and self.candidates[0] <= density <= self.candidates[-1]):
            raise ValueError(f"density: a decision must lie in [{self.candidates[0]}, "
                             f"{self.candidates[-1]}], got {density!r}")
        self.last_times = self.times(n, p, alpha, beta, variant)
        self._density = float(density)
        self.last = {"times_s": list(self.last_times), "gains": [float(g) for g in self.gains],
                     "density": self._density, "fit": "broadcast"}
        self._decided_net, self._decided_gain = network, float(np.mean(self.gains))
        return self._density

    @property
    def density(self) -> float | None:
        return self._density


__all__ = ["AUTHORS_CANDIDATES", "TRIGGERS", "DensityController", "asf_pick", "compression_gains",
           "exact_choice", "fit_objectives", "nsga2_choice", "pareto_front", "weighted_choice"]
