"""Asynchronous sparse averaging across data-parallel replicas (AsyncMesh: Ajanthan et al.,
arXiv 2601.22442, 2026, Sec. 4; the random subset in the style of SPARTA).

After each step ``t`` every replica of a stage draws the same random subset ``m_t`` of a
fraction ``rho`` of its parameters (the generator is seeded by (seed, stage, t), never by the
replica) and *starts* an allreduce of those ``rho x params x 4`` bytes on the replica-axis
group (``Collective.allreduce_async``: gloo runs it on its own threads while this rank goes on
computing; on an emulated link it completes after the link's modeled time). The replica waits
for it only at step ``t + tau`` (``tau = delay``), and writes it into the subset then, by one
of three rules (``correction``):

    x[m_t] <- xbar_t[m_t]                                   ("none": overwrite)
    x[m_t] <- xbar_t[m_t] + tau * e[m_t]                    ("ema", the default)
    x[m_t] <- xbar_t[m_t] + (w_{t+tau} - w_t)[m_t]          ("progress": exact local progress)

where ``e <- beta e + (1 - beta) (x_t - x_{t-1})`` (``beta = ema``) is an exponential moving
average of this replica's per-step drift (its optimizer step: ``x_{t-1}`` is taken after the
merges), and ``w_t`` the sum of those steps so far. The stale average is ``tau`` steps behind;
"progress" adds back exactly what this replica's own steps moved it since it sent,
``x_{t+tau} - x_t`` less the merges of other subsets in between (with subsets that overlap
within ``tau`` steps those would be counted twice, and the replicas driven apart); "ema"
estimates it as ``tau`` steps of average drift (with ``beta = 0`` and ``tau = 1`` the two are
the same rule). The paper's abstract names an EMA-based
correction of the average's staleness without its form: "ema" is *our reading* of it, and
"progress" the exact rule it approximates (the reference to measure it against). With
``rho = 1`` and ``tau = 0`` every rule is full synchronous parameter averaging every step (one
allreduce a step). ``ema=None`` is the same as ``correction="none"``.

``overlap=False`` keeps the blocking variant for comparison: the allreduce is waited for at
step ``t`` (each step pays the whole transfer) and only *applied* at ``t + tau``; it gives
exactly the same parameters as ``overlap=True``, only slower on a slow link.
"""
from __future__ import annotations

import time

import torch
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from ..comm import Collective, CommLedger

#: how a late average is merged: moved forward by tau EMA drifts, by the exact local progress,
#: or written as it is
CORRECTIONS = ("ema", "progress", "none")


class SparseAverager:
    def __init__(self, params, comm: Collective, fraction: float = 0.05, delay: int = 0,
                 ema: float | None = 0.9, overlap: bool = True, correction: str = "ema",
                 seed: int = 0, stage: int = 0):
        self.check_kw(fraction, delay, ema, overlap, correction)
        self.params = list(params)
        # its own ledger: an async call is recorded when it completes, from gloo's thread,
        # and must not take the step the main thread's ledger has moved on to (see records())
        self.comm = Collective(group=comm.group, ledger=CommLedger(), network=comm.network)
        self.fraction, self.delay, self.ema, self.overlap = float(fraction), int(delay), ema, bool(overlap)
        self.correction = "none" if correction == "ema" and ema is None else correction
        self.seed, self.stage = seed, stage
        self.n = sum(p.numel() for p in self.params)
        self.k = max(1, round(self.fraction * self.n))
        self.prev = self._flat().clone()
        self.drift = torch.zeros_like(self.prev)  # the EMA of the steps ("ema")
        self.walk = torch.zeros_like(self.prev)   # their sum ("progress")
        # (step sent, indices, future, this replica's walk when it sent: for "progress")
        self.pending: list[tuple[int, torch.Tensor, object, torch.Tensor | None]] = []
        self.sent: list[int] = []

    @staticmethod
    def check_kw(fraction: float = 0.05, delay: int = 0, ema: float | None = 0.9,
                 overlap: bool = True, correction: str = "ema") -> None:
        if not (isinstance(fraction, (int, float)) and 0.0 < fraction <= 1.0):
            raise ValueError(f"dp_kw fraction must be in (0, 1], got {fraction!r}")
        if not (isinstance(delay, int) and not isinstance(delay, bool) and delay >= 0):
            raise ValueError(f"dp_kw delay must be an int >= 0 (steps), got {delay!r}")
        if ema is not None and not (isinstance(ema, (int, float)) and 0.0 <= ema < 1.0):
            raise ValueError(f"dp_kw ema must be in [0, 1) or None (no correction), got {ema!r}")
        if not isinstance(overlap, bool):
            raise ValueError(f"dp_kw overlap must be True (non-blocking) or False (blocking), got {overlap!r}")
        if correction not in CORRECTIONS:
            raise ValueError(f"dp_kw correction must be one of {CORRECTIONS}, got {correction!r}")

    def subset(self, step: int) -> torch.Tensor:
        """Indices (sorted) of the coordinates averaged after ``step``: same on every replica."""
        g = torch.Generator().manual_seed((self.seed * 1_000_003 + self.stage) * 1_000_003 + step)
        return torch.randperm(self.n, generator=g)[: self.k].sort().values

    def _flat(self) -> torch.Tensor:
        return parameters_to_vector(self.params).detach()

    @torch.no_grad()
    def after_step(self, step: int) -> dict:
        """Start this step's subset on the wire; merge the averages that are due. Returns
        per-step info, ``avg_wait``: seconds this step was blocked on the replica axis."""
        x = self._flat()
        if not torch.isfinite(x).all():
            raise FloatingPointError(f"non-finite parameters on stage {self.stage} at step {step}")
        if self.correction == "ema":
            self.drift.mul_(self.ema).add_(x - self.prev, alpha=1.0 - self.ema)
        elif self.correction == "progress":
            self.walk.add_(x - self.prev)
        idx = self.subset(step)
        mine = self.walk[idx].clone() if self.correction == "progress" else None
        waited = 0.0
        if self.overlap:
            fut = self.comm.allreduce_async(x[idx].clone(), tag="avg")
        else:
            t0 = time.perf_counter()
            fut = self.comm.allreduce_async(x[idx].clone(), tag="avg")
            fut.wait()  # the blocking variant: the step pays the whole transfer now
            waited += time.perf_counter() - t0
        self.pending.append((step, idx, fut, mine))
        self.sent.append(step)
        merged = 0
        while self.pending and self.pending[0][0] <= step - self.delay:
            sent, sidx, fut, then = self.pending.pop(0)
            t0 = time.perf_counter()
            avg = fut.wait() / self.comm.world_size
            waited += time.perf_counter() - t0
            if self.correction == "ema":
                avg = avg + (step - sent) * self.drift[sidx]
            elif self.correction == "progress":
                avg = avg + (self.walk[sidx] - then)
            x[sidx] = avg
            merged += 1
        vector_to_parameters(x, self.params)
        self.prev = x.clone()
        return {"avg_subset_sum": int(idx.sum()), "avg_merged": merged, "avg_wait": waited}

    def state_dict(self) -> dict:
        """What the averager carries to the next step, for a checkpoint: the previous
        parameters, the drift estimate, the averages still to be merged (waited for now: an
        average does not depend on when it is waited for), what was sent and its records."""
        return {"prev": self.prev.clone(), "drift": self.drift.clone(), "walk": self.walk.clone(),
                "pending": [(s, idx, fut.wait().clone(), mine) for s, idx, fut, mine in self.pending],
                "sent": list(self.sent), "records": list(self.comm.ledger.records)}

    def load_state_dict(self, state: dict) -> None:
        """Continue from :meth:`state_dict` (the pending averages as completed futures)."""
        self.prev, self.drift = state["prev"].clone(), state["drift"].clone()
        self.walk = state["walk"].clone()
        self.pending = []
        for s, idx, value, mine in state["pending"]:
            fut: torch.futures.Future = torch.futures.Future()
            fut.set_result(value.clone())
            self.pending.append((s, idx, fut, mine))
        self.sent = list(state["sent"])
        self.comm.ledger.records[:0] = state["records"]

    def close(self) -> None:
        """Wait for the averages still in flight (the process group must outlive them); they
        are not merged: training has ended."""
        for _, _, fut, _ in self.pending:
            fut.wait()
        self.pending.clear()

    def records(self):
        """This averager's ledger records, each stamped with the step that *sent* it. Records
        are appended as calls complete; every call carries the same ``4k`` bytes, so stamping
        them in issue order gives every step exactly its own bytes."""
        return [r._replace(step=s) for r, s in zip(self.comm.ledger.records, self.sent)]
