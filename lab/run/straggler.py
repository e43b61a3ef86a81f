"""Stragglers made reproducible: a per-rank compute slowdown and optional random delays.

A rank with slowdown ``factor`` sleeps ``(factor - 1) x`` its measured compute time after each
forward/backward, so it computes ``factor`` times slower than its peers, whatever the machine.
``jitter`` adds a uniform random delay in ``[0, jitter]`` seconds per step, drawn from a
generator seeded by (seed, rank), so the same config gives the same delays. ``device_s`` makes
the rank an emulated device instead (as the pipeline's ``forward_s``, Part 9): its forward and
backward last ``device_s`` seconds (times ``factor``) whatever they measured, the rest slept, so
compute against communication is set by the config, not by this machine's load. A pass that
measured longer than that is not shortened.
"""
from __future__ import annotations

import random
import time


class Straggler:
    """A rank's compute slowdown ``factor`` (>= 1) and random extra delay (up to ``jitter``
    seconds per step, drawn from a generator seeded by (seed, rank))."""

    def __init__(self, factor: float = 1.0, jitter: float = 0.0, seed: int = 0, rank: int = 0,
                 device_s: float | None = None):
        if not factor >= 1.0:
            raise ValueError(f"slowdown factor must be >= 1, got {factor!r}")
        if not jitter >= 0.0:
            raise ValueError(f"jitter must be >= 0 seconds, got {jitter!r}")
        if device_s is not None and not (isinstance(device_s, (int, float)) and 0 < device_s <= 60):
            raise ValueError(f"device_s must be a number of seconds in (0, 60], got {device_s!r}")
        self.factor, self.jitter = float(factor), float(jitter)
        self.device_s = None if device_s is None else float(device_s)
        self.rng = random.Random(seed * 1_000_003 + rank)

    @property
    def active(self) -> bool:
        """Whether this rank is slowed at all (a factor above 1 or some jitter)."""
        return self.factor > 1.0 or self.jitter > 0.0 or self.device_s is not None

    def pause(self, compute_s: float) -> float:
        """Sleep as this rank's slowdown says; returns the seconds slept."""
        if not self.active:
            return 0.0
        if self.device_s is not None:  # the emulated device: a fixed pass, the rest slept
            extra = max(0.0, self.device_s * self.factor - compute_s)
        else:
            extra = (self.factor - 1.0) * compute_s
        extra += self.rng.uniform(0, self.jitter) if self.jitter else 0.0
        if extra > 0:
            t0 = time.perf_counter()
            time.sleep(extra)
            return time.perf_counter() - t0
        return 0.0
