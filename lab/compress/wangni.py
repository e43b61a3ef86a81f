"""Variance-optimal unbiased sparsification (Wangni et al.).

Wangni, Wang, Liu, Zhang, "Gradient Sparsification for Communication-Efficient Distributed
Optimization", NeurIPS 2018, Sec. 3: keep coordinate i independently with probability p_i and
send g_i / p_i, so E[Q(g)] = g. Minimising the variance sum_i g_i^2 (1/p_i - 1) under an
expected budget sum_i p_i = B gives

    p_i = min(lambda |g_i|, 1),  lambda such that sum_i p_i = B.

``method="exact"`` solves for lambda exactly by water-filling over the sorted magnitudes (only
the top floor(B)+1 can saturate, so a partial sort suffices); ``method="greedy"`` runs the
paper's fixed-point iteration (start from p_i = min(B |g_i| / ||g||_1, 1), then rescale the
unsaturated p_i so the budget holds, ``iters`` times), which is what the paper recommends in
practice [reading: the paper numbers these algorithms differently across versions].

Budget: B = density * n (not rounded), or ``k`` if given. Zero entries get p_i = 0; if at most B
entries are non-zero they are all sent as they are. No error feedback: the estimator is
unbiased. Payload ``(values, int32 indices)``; the count is random with mean B (ragged).
"""
from __future__ import annotations

import torch

from ..argspec import Arg, takes
from .base import register
from .topk import DENSITY, KEPT, SparseCodec, sparse_payload


def wangni_probabilities(mag: torch.Tensor, budget: float, method: str = "exact",
                         iters: int = 2) -> torch.Tensor:
    """Keep-probabilities p (float64) with p_i = min(lambda mag_i, 1) and sum p = budget."""
    m = mag.double()
    nnz = int((m > 0).sum())
    if nnz <= budget:
        return (m > 0).double()
    total = m.sum()
    if method == "greedy":
        p = (budget * m / total).clamp_(max=1.0)
        for _ in range(iters):
            active = p < 1
            if not active.any():
                break
            c = (budget - (~active).sum()) / p[active].sum()
            p[active] = (c * p[active]).clamp_(max=1.0)
            if c <= 1:
                break
        return p
    # exact: j saturated entries (the j largest) leave lambda_j = (B - j) / (mass of the rest);
    # the answer is the smallest j whose next entry is not saturated, lambda_j * a_(j+1) <= 1.
    top = torch.topk(m, min(m.numel(), int(budget) + 1), sorted=True).values
    before = torch.cumsum(top, 0) - top  # mass of the j largest, j = 0, 1, ...
    j = torch.arange(top.numel(), dtype=torch.float64, device=top.device)
    lam = (budget - j) / (total - before)
    ok = lam * top <= 1 + 1e-12
    first = int(torch.argmax(ok.to(dtype=torch.uint8)))
    return (lam[first] * m).clamp_(max=1.0)


@register("wangni")
@takes(density=DENSITY, k=KEPT,
       method=Arg(str, choices=("exact", "greedy"), help="how the probabilities are solved"),
       iters=Arg(int, ge=1, le=1000, help="rounds of the greedy method"))
class Wangni(SparseCodec):
    """Unbiased sparsifier with variance-optimal keep probabilities (see module docstring)."""

    name = "wangni"

    def __init__(self, density: float = 0.01, k: int | None = None, method: str = "exact",
                 iters: int = 2, seed: int = 0):
        self.density, self.k, self.method, self.iters = density, k, method, iters
        super().__init__(seed=seed)

    def budget(self, n: int) -> float:
        """The expected number of values kept of ``n``: ``k`` (at most ``n``; a ValueError
        where it exceeds a nonempty tensor), else ``density * n``."""
        if self.k is not None:
            if self.k > n and n > 0:
                raise ValueError(f"k={self.k} exceeds the tensor's {n} elements")
            return float(min(self.k, n))
        return self.density * n

    def encode(self, flat, key):
        n = flat.numel()
        if n == 0:
            return sparse_payload(flat, torch.empty(0, dtype=torch.int64)), None
        p = wangni_probabilities(flat.abs(), self.budget(n), self.method, self.iters)
        u = torch.rand(n, generator=self.generator_for(p.device), dtype=torch.float64,
                       device=p.device)
        idx = torch.where(u < p)[0]
        vals = (flat[idx].double() / p[idx]).to(flat.dtype)
        return sparse_payload(flat, idx, vals), None

    def __repr__(self):
        arg = f"k={self.k}" if self.k is not None else f"density={self.density}"
        return f"Wangni({arg}, method={self.method!r})"
