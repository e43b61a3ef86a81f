"""Asynchronous sparse averaging across data-parallel replicas (AsyncMesh: Ajanthan et al.,
arXiv 2601.22442, 2026, Sec. 4; the random subset in the style of SPARTA).

After each step ``t`` every replica of a stage draws the same random subset ``m_t`` of a
fraction ``rho`` of its parameters (the generator is seeded by (seed, stage, t), never by the
replica), and the replicas average those coordinates with one allreduce of
``rho x params x 4`` bytes on the replica-axis group. The average arrives ``tau = delay``
steps later; meanwhile the replicas keep training. When it arrives at step ``t + tau`` the
replica writes it into the subset:

    x[m_t] <- xbar_t[m_t]                                   (no correction: overwrite)
    x[m_t] <- xbar_t[m_t] + tau * e[m_t]                    (EMA correction)

where ``e <- beta e + (1 - beta) (x_t - x_{t-1})`` is an exponential moving average of this
replica's per-step drift. The stale average is ``tau`` steps behind; the replicas all follow
(on average) the same descent direction, so moving it ``tau`` steps along the estimated drift
approximates the average of *now*. Our reading of the paper's EMA-based correction of the
average staleness (the paper is the authority for its exact estimator). With ``rho = 1`` and
``tau = 0`` this is full synchronous parameter averaging every step.
"""
from __future__ import annotations

import torch
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from ..comm import Collective


class SparseAverager:
    def __init__(self, params, comm: Collective, fraction: float = 0.05, delay: int = 0,
                 ema: float | None = 0.9, seed: int = 0, stage: int = 0):
        self.check_kw(fraction, delay, ema)
        self.params, self.comm = list(params), comm
        self.fraction, self.delay, self.ema = float(fraction), int(delay), ema
        self.seed, self.stage = seed, stage
        self.n = sum(p.numel() for p in self.params)
        self.k = max(1, round(self.fraction * self.n))
        self.prev = self._flat().clone()
        self.drift = torch.zeros_like(self.prev)
        self.pending: list[tuple[int, torch.Tensor, torch.Tensor]] = []

    @staticmethod
    def check_kw(fraction: float = 0.05, delay: int = 0, ema: float | None = 0.9) -> None:
        if not (isinstance(fraction, (int, float)) and 0.0 < fraction <= 1.0):
            raise ValueError(f"dp_kw fraction must be in (0, 1], got {fraction!r}")
        if not (isinstance(delay, int) and not isinstance(delay, bool) and delay >= 0):
            raise ValueError(f"dp_kw delay must be an int >= 0 (steps), got {delay!r}")
        if ema is not None and not (isinstance(ema, (int, float)) and 0.0 <= ema < 1.0):
            raise ValueError(f"dp_kw ema must be in [0, 1) or None (no correction), got {ema!r}")

    def subset(self, step: int) -> torch.Tensor:
        """Indices (sorted) of the coordinates averaged after ``step``: same on every replica."""
        g = torch.Generator().manual_seed((self.seed * 1_000_003 + self.stage) * 1_000_003 + step)
        return torch.randperm(self.n, generator=g)[: self.k].sort().values

    def _flat(self) -> torch.Tensor:
        return parameters_to_vector(self.params).detach()

    @torch.no_grad()
    def after_step(self, step: int) -> dict:
        """Send this step's subset; merge the averages that are due. Returns per-step info."""
        x = self._flat()
        if not torch.isfinite(x).all():
            raise FloatingPointError(f"non-finite parameters on stage {self.stage} at step {step}")
        if self.ema is not None:
            self.drift.mul_(self.ema).add_(x - self.prev, alpha=1.0 - self.ema)
        idx = self.subset(step)
        values = x[idx].clone()
        self.comm.allreduce(values, tag="avg")  # the replica axis; counted in the ledger
        self.pending.append((step, idx, values / self.comm.world_size))
        merged = 0
        while self.pending and self.pending[0][0] <= step - self.delay:
            sent, sidx, avg = self.pending.pop(0)
            lag = step - sent
            x[sidx] = avg + lag * self.drift[sidx] if self.ema is not None else avg
            merged += 1
        vector_to_parameters(x, self.params)
        self.prev = x.clone()
        return {"avg_subset_sum": int(idx.sum()), "avg_merged": merged}
