"""MSTopK: Top-k by a threshold search instead of a sort, exchanged through an allgather.

Shi et al., "Towards Scalable Distributed Training of Deep Learning on Public Cloud
Clusters", MLSys 2021 (the MSTopK operator), one of the baselines of Tyagi & Swany, BigData
2023 (their ``mstopk/mstopk_run.py`` and ``MSTopKCompression`` in
``miscellaneous/compression.py``, sahiltyagi4/ARTopk). On ``a = |g + e|`` (error feedback,
``e`` starts at zero), ``N`` rounds of binary search over thresholds between ``mean(a)`` and
``max(a)``::

    t = mean(a) + r (max(a) - mean(a)),   r halves its interval each round,
    k1 = the largest count(a >= t) <= k  (threshold t1),
    k2 = the smallest count(a >= t) > k  (threshold t2);

send every entry with ``a >= t1`` and ``k - k1`` of the band ``t2 <= a < t1``, a contiguous run
of the band's indices from a random start. The search counts instead of sorting (cheap on a
GPU); the selection is exactly k entries, all of the largest k1, none outside the largest
k2 (:func:`mstopk_indices`). Values and int32 indices of every rank are allgathered
(exactly 8k bytes each, so no size exchange). Fixes over the authors' code: the residual
starts at zero (``torch.empty`` there), the random start cannot run past the band (their
``randint(0, len - (k - k1) + 1)`` can, sending k - 1), and a tensor whose entries all tie
selects k, not all of them (their ``t1 = 0`` when no count fits).
"""
from __future__ import annotations

import torch

from ..argspec import Arg, takes
from ..compress.base import check_finite
from ..compress.topk import DENSITY, resolve_k
from .base import LAYERWISE, Aggregator, register


def mstopk_indices(x: torch.Tensor, k: int, rounds: int = 25,
                   generator: torch.Generator | None = None) -> tuple[torch.Tensor, dict]:
    """The k indices MSTopK selects from ``x`` (1-D), and the search's ``k1``, ``k2``, ``t1``,
    ``t2``: all entries with ``|x| >= t1`` (k1 of them) plus ``k - k1`` from the band."""
    a = x.detach().abs().float()
    n = a.numel()
    if k >= n:
        return torch.arange(n, device=x.device), {"k1": n, "k2": n, "t1": 0.0, "t2": 0.0}
    mean, top = float(a.mean()), float(a.max())
    lo, hi, k1, k2 = 0.0, 1.0, 0, n
    t1, t2 = float("inf"), 0.0
    for _ in range(rounds):
        ratio = lo + (hi - lo) / 2
        t = mean + ratio * (top - mean)
        nnz = int((a >= t).sum())
        if nnz <= k:
            hi = ratio
            if nnz > k1:
                k1, t1 = nnz, t
        else:
            lo = ratio
            if nnz < k2:
                k2, t2 = nnz, t
    above = torch.nonzero(a >= t1).reshape(-1)
    band = torch.nonzero((a < t1) & (a >= t2)).reshape(-1)
    need = k - above.numel()
    start = int(torch.randint(0, band.numel() - need + 1, (1,), generator=generator))
    idx = torch.cat([above, band[start: start + need]])
    return idx, {"k1": above.numel(), "k2": above.numel() + band.numel(), "t1": t1, "t2": t2}


@register("mstopk")
@takes(density=DENSITY, layerwise=LAYERWISE,
       rounds=Arg(int, ge=1, le=64, help="rounds of the threshold search (N)"),
       seed=Arg(int, ge=0, help="seed of the band's random start"))
class MSTopK(Aggregator):
    """MSTopK with error feedback through an allgather; ``info()`` gives k, the search's k1
    and k2 (the counts at its two thresholds) per step."""

    name = "mstopk"

    def __init__(self, comm, layerwise: bool = False, density: float = 0.01, rounds: int = 25,
                 seed: int = 0):
        super().__init__(comm, None, layerwise)
        self.density, self.rounds = density, rounds
        self.generator = torch.Generator().manual_seed(1_000_003 * seed + comm.rank)
        self.residuals: dict = {}
        self._info: dict = {}

    def reduce(self, tensor, key, step):
        check_finite(tensor, "mstopk")
        flat = tensor.detach().reshape(-1)
        e = self.residuals.get(key)
        acc = flat.clone() if e is None else flat + e  # residual starts at zero
        k = resolve_k(acc.numel(), self.density)
        idx, search = mstopk_indices(acc, k, self.rounds, self.generator)
        total = torch.zeros_like(acc)
        for vals, ids in self.comm.allgather_payload((acc[idx], idx.to(torch.int32)),
                                                     tag="mstopk", same_size=True):
            total.index_add_(0, ids.long(), vals)
        self.residuals[key] = acc.index_fill(0, idx, 0)
        self._info = {"k": k, "k1": search["k1"], "k2": search["k2"]}
        return total.div_(self.comm.world_size).view_as(tensor)

    def info(self) -> dict:
        return dict(self._info)
