"""Who chooses the shared Top-k indices (Tyagi & Swany, BigData 2023, Sec. III-A).

STAR-Topk rotates the leader round-robin, ``r_t = t mod p``: no communication at all.
VAR-Topk lets the rank with the largest smoothed gradient norm lead, which takes one extra
allgather of a single float per rank. The smoothing is an exponential moving average of
``||g + e||`` (our reading: the paper says "smoothed" without fixing the filter).
"""
from __future__ import annotations

import math

import torch

from ..comm import Collective


def star_leader(step: int, world_size: int) -> int:
    """Round-robin leader of STAR-Topk."""
    return step % world_size


class VarLeader:
    """VAR-Topk: ``pick(norm)`` smooths this rank's norm, allgathers every rank's smoothed
    norm (4 bytes each, tag ``artopk:norm``) and returns the argmax (lowest rank on ties).
    Every rank sees the same gathered vector, so every rank returns the same leader."""

    def __init__(self, comm: Collective, smoothing: float = 0.9):
        if not isinstance(smoothing, (int, float)) or not 0 <= smoothing < 1:
            raise ValueError(f"smoothing must be in [0, 1), got {smoothing!r}")
        self.comm, self.smoothing = comm, float(smoothing)
        self.smoothed: float | None = None  # first step: the norm itself, not a biased 0

    def pick(self, norm: float) -> int:
        if not math.isfinite(norm):
            raise FloatingPointError(f"VAR-Topk: gradient norm is {norm}; refusing to pick a leader")
        s = self.smoothing
        self.smoothed = norm if self.smoothed is None else s * self.smoothed + (1 - s) * norm
        norms = self.comm.allgather(torch.tensor([self.smoothed], dtype=torch.float32),
                                    tag="artopk:norm", same_size=True)
        return int(torch.cat(norms).argmax())  # argmax returns the first maximum
