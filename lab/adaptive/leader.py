"""Who chooses the shared Top-k indices (Tyagi & Swany, BigData 2023, Sec. III-A).

STAR-Topk rotates the leader round-robin, ``r_t = t mod p``: no communication at all.
VAR-Topk lets the rank with the largest smoothed gradient norm lead, which takes one extra
allgather of a single float per rank. Two smoothing rules:

- ``rule="windowed"`` (default, the authors'): the norm of the *raw* gradient ``||g||``,
  smoothed by the windowed EWMA of ``EWMAMeter`` in ``flexible_compression/miscellaneous/
  helper.py`` (window 25, smoothing 0.001, the defaults of ``artopk/var_topk.py``). Until the
  window is full the smoothed value is 0 on every rank, so rank 0 leads the first 24 steps.
- ``rule="ema"`` (the lab's earlier reading): an EMA (0.9) of the error-corrected ``||g + e||``.
"""
from __future__ import annotations

import math

import torch

from ..comm import Collective

#: How VAR-Topk smooths the norms: the authors' windowed EWMA, or the lab's EMA.
LEADER_RULES = ("windowed", "ema")


def star_leader(step: int, world_size: int) -> int:
    """Round-robin leader of STAR-Topk."""
    return step % world_size


class WindowedEWMA:
    """The authors' ``EWMAMeter``: over the last ``window`` values, the newest weighted
    ``(1-s)^1``, the oldest ``(1-s)^window``, normalised; 0 until ``window`` values are in."""

    def __init__(self, window: int = 25, smoothing: float = 0.001):
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(f"window must be an int >= 1, got {window!r}")
        if not isinstance(smoothing, (int, float)) or not 0 <= smoothing < 1:
            raise ValueError(f"smoothing must be in [0, 1), got {smoothing!r}")
        self.window, self.smoothing = window, float(smoothing)
        self.values: list[float] = []
        self.value = 0.0

    def update(self, x: float) -> float:
        self.values.append(float(x))
        if len(self.values) == self.window:
            w = [(1 - self.smoothing) ** (self.window - i) for i in range(self.window)]
            self.value = sum(wi * v for wi, v in zip(w, self.values)) / sum(w)
            self.values.pop(0)
        return self.value


class VarLeader:
    """VAR-Topk: ``pick(norm)`` smooths this rank's norm, allgathers every rank's smoothed
    norm (4 bytes each, tag ``artopk:norm``) and returns the argmax (lowest rank on ties).
    Every rank sees the same gathered vector, so every rank returns the same leader.
    ``raw_norm`` says which norm the caller must pass: ``||g||`` (True) or ``||g + e||``."""

    def __init__(self, comm: Collective, rule: str = "windowed", window: int = 25,
                 smoothing: float | None = None):
        if rule not in LEADER_RULES:
            raise ValueError(f"leader rule must be one of {LEADER_RULES}, got {rule!r}")
        if smoothing is None:
            smoothing = 0.001 if rule == "windowed" else 0.9
        if not isinstance(smoothing, (int, float)) or not 0 <= smoothing < 1:
            raise ValueError(f"smoothing must be in [0, 1), got {smoothing!r}")
        self.comm, self.rule, self.smoothing = comm, rule, float(smoothing)
        self.raw_norm = rule == "windowed"
        self.meter = WindowedEWMA(window, smoothing) if rule == "windowed" else None
        self.smoothed: float | None = None  # ema: first step is the norm itself, not a biased 0

    def pick(self, norm: float) -> int:
        if not math.isfinite(norm):
            raise FloatingPointError(f"VAR-Topk: gradient norm is {norm}; refusing to pick a leader")
        if self.meter is not None:
            self.smoothed = self.meter.update(norm)
        else:
            s = self.smoothing
            self.smoothed = norm if self.smoothed is None else s * self.smoothed + (1 - s) * norm
        norms = self.comm.allgather(torch.tensor([self.smoothed], dtype=torch.float32),
                                    tag="artopk:norm", same_size=True)
        return int(torch.cat(norms).argmax())  # argmax returns the first maximum
