"""Stragglers made reproducible: a per-rank compute slowdown and optional random delays.

A rank with slowdown ``factor`` sleeps ``(factor - 1) x`` its measured compute time after each
forward/backward, so it computes ``factor`` times slower than its peers, whatever the machine.
``jitter`` adds a uniform random delay in ``[0, jitter]`` seconds per step, drawn from a
generator seeded by (seed, rank), so the same config gives the same delays.
"""
from __future__ import annotations

import random
import time


class Straggler:
    """A rank's compute slowdown ``factor`` (>= 1) and random extra delay (up to ``jitter``
    seconds per step, drawn from a generator seeded by (seed, rank))."""

    def __init__(self, factor: float = 1.0, jitter: float = 0.0, seed: int = 0, rank: int = 0):
        if not factor >= 1.0:
            raise ValueError(f"slowdown factor must be >= 1, got {factor!r}")
        if not jitter >= 0.0:
            raise ValueError(f"jitter must be >= 0 seconds, got {jitter!r}")
        self.factor, self.jitter = float(factor), float(jitter)
        self.rng = random.Random(seed * 1_000_003 + rank)

    @property
    def active(self) -> bool:
        """Whether this rank is slowed at all (a factor above 1 or some jitter)."""
        return self.factor > 1.0 or self.jitter > 0.0

    def pause(self, compute_s: float) -> float:
        """Sleep as this rank's slowdown says; returns the seconds slept."""
        if not self.active:
            return 0.0
        extra = (self.factor - 1.0) * compute_s + (self.rng.uniform(0, self.jitter) if self.jitter else 0.0)
        if extra > 0:
            t0 = time.perf_counter()
            time.sleep(extra)
            return time.perf_counter() - t0
        return 0.0
