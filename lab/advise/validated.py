"""The error band each method's predicted step carries: lab.sim's validation of its family.

:func:`lab.sim.band.band` gives the worst relative step-time error of a technique family on the
held-out kernel-link runs stored in ``book/12_at_scale/validation.json``; a method whose name
:func:`lab.sim.step.family` does not know was never validated, and is said to be so (never
lent another family's band).
"""
from __future__ import annotations

import math


def band_of(method: str) -> tuple[float | None, str]:
    """(worst relative step-time error of ``method``'s family, where from); ``(None, "not
    validated")`` for a method outside the validation's families or with no stored validation."""
    from ..sim.band import band
    from ..sim.step import family
    try:
        fam = family(method)
    except KeyError:
        return None, "not validated"
    worst, where = band(fam)
    if worst is None or not math.isfinite(worst) or where.startswith("not validated"):
        return None, f"not validated ({where})"
    return float(worst), f"{where} ({fam})"


def band_text(worst: float | None, where: str) -> str:
    """'+/-33%, worst of 5 held-out runs of its family ...' or 'not validated'."""
    return where if worst is None else f"+/-{100 * worst:.0f}%, {where}"
