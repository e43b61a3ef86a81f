"""The error band a prediction carries: its family's errors on the stored held-out runs, the
worst over every campaign (seed 52 scored by model 1, the fresh seed-53 draw by model 2, the
third draw, seed 54, by model 3; the fourth, seed 55, by model 4)."""
from __future__ import annotations

import functools


@functools.lru_cache(maxsize=1)
def _scored() -> tuple:
    from .validate import CAMPAIGNS, stored
    return tuple(stored(out) for _, out, _, _ in CAMPAIGNS.values() if out.exists())


def band(family: str) -> tuple[float, str]:
    """(worst relative step-time error of ``family`` on the stored validations, where from);
    the worst over every family if this one was not validated."""
    runs = _scored()
    if not runs:
        return float("nan"), "no stored validation"
    got = [s["families"][family] for s in runs if family in s["families"]]
    if not got:
        return max(s["all"]["worst"] for s in runs), "not validated: the worst of every family"
    n = sum(f["configs"] for f in got)
    return (max(f["worst"] for f in got),
            f"worst of {n} held-out runs of its family in {len(got)} campaign(s) on this machine")
