"""Argument checks shared by the attacks, usable before launch (``check(cfg, workers)``)."""
from __future__ import annotations

import math


def positive(attack: str, name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 \
            or not math.isfinite(value):
        raise ValueError(f"{attack}: {name} must be a finite number > 0, got {value!r}")
    return float(value)


def known(attack: str, kw: dict, allowed: tuple) -> None:
    unknown = set(kw) - set(allowed)
    if unknown:
        raise ValueError(f"{attack}: unknown attack_kw {sorted(unknown)} (known: {list(allowed)})")


def checker(attack: str, **defaults):
    """A ``check(cls, cfg, workers)`` classmethod: known keys, positive values."""
    def check(cls, cfg, workers):
        known(attack, cfg.attack_kw, tuple(defaults))
        for k, v in cfg.attack_kw.items():
            positive(attack, k, v)
    return classmethod(check)
