"""The error band a prediction carries: its family's errors on the stored held-out runs."""
from __future__ import annotations

import functools


@functools.lru_cache(maxsize=1)
def _scored():
    from .validate import MEASURED, stored
    return stored() if MEASURED.exists() else None


def band(family: str) -> tuple[float, str]:
    """(worst relative step-time error of ``family`` on the stored validation, where from);
    the worst over every family if this one was not validated."""
    s = _scored()
    if s is None:
        return float("nan"), "no stored validation"
    f = s["families"].get(family)
    if f is None:
        return s["all"]["worst"], "not validated: the worst of every family"
    return f["worst"], f"worst of {f['configs']} held-out runs of its family on this machine"
