"""Argument checks shared by the attacks, usable before launch (``check(cfg, workers)``)."""
from __future__ import annotations

import math


def positive(attack: str, name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 \
            or not math.isfinite(value):
        raise ValueError(f"{attack}: {name} must be a finite number > 0, got {value!r}")
    return float(value)


def checker(attack: str):
    """A ``check(cls, cfg, workers)`` classmethod: positive values (unknown keys are refused by
    ``TrainConfig`` itself, from the attack's signature)."""
    def check(cls, cfg, workers):
        for k, v in cfg.attack_kw.items():
            positive(attack, k, v)
    return classmethod(check)
