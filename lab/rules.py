"""The claims registry's decision rules: one rule per kind of claim, fixed before any run.

The registry (``book/claims.toml``, read by :func:`registry`) gives each claim a *kind* and the
kind's parameters; the runs give the numbers; a function here gives the verdict (one of
:data:`lab.claims.VERDICTS`) and the interval it rests on. No chapter declares a rule of its own.

- **ratio** (a speedup, a byte or time reduction, "A beats B"; always baseline over method, so
  above 1 is the claimed direction): the median of at least ``MIN_ROUNDS`` (9) interleaved rounds
  (``MIN_ROUNDS_SMALL``, 25, where the registered effect ``T`` is below 1.10) and its 95% interval
  from order statistics (the binomial interval for a median, :func:`median_interval`). **holds**
  if the interval's low end is at least ``T``; **holds in part** if it is above 1 but below
  ``T``; else **does not hold here**, a *loss* if the high end is below 1, else *inconclusive*.
- **parity** ("no worse than", "matches accuracy"): the gap to the baseline (positive: the
  method is worse) over at least ``MIN_SEEDS`` (3) seeds, with its 95% Student-t interval.
  **holds** if the interval's upper end is within the tolerance; **holds in part** if the mean
  is; else **does not hold here**.
- **bound** (a variance bound, unbiasedness, an identity): a Monte Carlo or exact estimate with
  its standard error against the bound, ``<=`` or ``>=``. **holds** if the bound holds at the
  far 95% end (estimate + 1.96 se for ``<=``), **does not hold here** if it fails at the near
  end, else **holds in part**.
- **deterministic** (ledger bytes, a modeled clock, a formula: a quantity that does not vary
  between runs): one run; ``holds`` thresholds, and optionally ``in_part`` ones, as
  :func:`lab.claims.verdict` judges them.
"""
from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass, field

from .claims import VERDICTS, _OPS, verdict

KINDS = ("ratio", "parity", "bound", "deterministic")
MIN_ROUNDS, MIN_ROUNDS_SMALL, MIN_SEEDS = 9, 25, 3
LEVEL = 0.95
Z = 1.959963984540054  # the normal 97.5% quantile


@dataclass(frozen=True)
class Judged:
    """A verdict with what it rests on: the point estimate, its interval, the sample size and,
    for a ratio that does not hold, whether it is a loss or inconclusive."""
    verdict: str
    estimate: float
    low: float
    high: float
    n: int
    note: str = ""
    extra: dict = field(default_factory=dict)


def _finite(name: str, xs) -> list[float]:
    vals = [float(x) for x in xs]
    bad = [x for x in vals if not math.isfinite(x)]
    if bad:
        raise ValueError(f"{name} must be finite numbers, got {bad[:3]}")
    return vals


def median_interval(xs, level: float = LEVEL) -> tuple[float, float, float]:
    """(median, low, high): the order statistics x_(j) and x_(n+1-j) with j the largest index
    whose binomial(n, 1/2) tail P(B <= j - 1) is at most (1 - level) / 2; coverage at least
    ``level`` (at n = 9: x_(2) and x_(8), 96.1%)."""
    vals = sorted(_finite("rounds", xs))
    n = len(vals)
    j = _order_index(n, level)
    if j == 0:
        raise ValueError(f"a {level:.0%} interval for a median needs at least 6 rounds, got {n}")
    return statistics.median(vals), vals[j - 1], vals[n - j]


@functools.lru_cache(maxsize=None)
def _order_index(n: int, level: float) -> int:
    from scipy.stats import binom
    j = 0
    while j + 1 <= n and binom.cdf(j, n, 0.5) <= (1 - level) / 2:
        j += 1
    return j


def ratio(rounds, T: float) -> Judged:
    """The ratio rule (module docstring) for ``rounds``, each one interleaved round's ratio."""
    if not (isinstance(T, (int, float)) and T > 1):
        raise ValueError(f"T (the registered effect) must be a number above 1, got {T!r}")
    vals = _finite("rounds", rounds)
    need = MIN_ROUNDS_SMALL if T < 1.10 else MIN_ROUNDS
    if len(vals) < need:
        raise ValueError(f"a ratio claim with T = {T:g} needs at least {need} rounds, got {len(vals)}")
    med, low, high = median_interval(vals)
    v = _decide({"kind": "ratio", "T": T}, med, low, high)
    if v == VERDICTS[0]:
        note = ""
    elif v == VERDICTS[1]:
        note = f"the interval's low end {low:.4g} is above 1, below T = {T:g}"
    else:
        note = "a loss: the interval lies below 1" if high < 1 else "inconclusive: the interval contains 1"
    return Judged(v, med, low, high, len(vals), note)


def parity(gaps, tolerance: float) -> Judged:
    """The parity rule for ``gaps`` (method minus baseline in the bad direction, one a seed)."""
    from scipy.stats import t
    if not (isinstance(tolerance, (int, float)) and tolerance > 0):
        raise ValueError(f"tolerance must be a positive number, got {tolerance!r}")
    vals = _finite("gaps", gaps)
    if len(vals) < MIN_SEEDS:
        raise ValueError(f"a parity claim needs at least {MIN_SEEDS} seeds, got {len(vals)}")
    mean, n = statistics.fmean(vals), len(vals)
    half = t.ppf(1 - (1 - LEVEL) / 2, n - 1) * statistics.stdev(vals) / math.sqrt(n)
    low, high = mean - half, mean + half
    v = _decide({"kind": "parity", "tolerance": tolerance}, mean, low, high)
    note = {VERDICTS[0]: "",
            VERDICTS[1]: f"the mean gap is within {tolerance:g}, the interval's upper end not",
            VERDICTS[2]: f"the mean gap {mean:.4g} is above the tolerance {tolerance:g}"}[v]
    return Judged(v, mean, low, high, n, note)


def bound(estimate: float, se: float, op: str, limit: float) -> Judged:
    """The bound rule: ``estimate`` (standard error ``se``, 0 for an exact quantity) against
    ``op limit`` with ``op`` ``<=`` or ``>=``."""
    est, se = _finite("estimate and se", (estimate, se))
    if se < 0 or op not in ("<=", ">="):
        raise ValueError(f"se must be >= 0 and op '<=' or '>=', got se={se!r}, op={op!r}")
    low, high = est - Z * se, est + Z * se
    far, near = (high, low) if op == "<=" else (low, high)
    v = _decide({"kind": "bound", "op": op, "limit": limit}, est, low, high)
    note = {VERDICTS[0]: "",
            VERDICTS[2]: f"the bound fails even at the interval's near end ({near:.4g})",
            VERDICTS[1]: (f"the 95% interval straddles the bound: it holds at the near end "
                          f"({near:.4g}), not at the far end ({far:.4g})")}[v]
    return Judged(v, est, low, high, 1, note)


def deterministic(value, holds, in_part=None) -> Judged:
    """A quantity that does not vary between runs: its thresholds, judged once."""
    v = verdict(value, holds, in_part)
    x = float(value) if not isinstance(value, dict) else math.nan
    return Judged(v, x, x, x, 1, "deterministic: one run decides")


RULE_FIELDS = ("kind", "T", "holds", "in_part", "tolerance", "op", "limit", "parts")
_NEED = {"ratio": ("T", "T_source"), "parity": ("tolerance", "tolerance_source"),
         "bound": ("op", "limit"), "deterministic": ("holds",)}


def weakest(verdicts) -> str:
    """A composite claim's verdict: its weakest part's."""
    return max(verdicts, key=VERDICTS.index)


def rule_of(entry: dict) -> dict:
    """The fields of an entry that make its rule (a change to any of them needs a history line)."""
    return {k: entry[k] for k in RULE_FIELDS if k in entry}


def _check_rule(where: str, e: dict) -> None:
    kind = e.get("kind")
    if kind not in KINDS:
        raise ValueError(f"claims.toml: {where}: kind must be one of {KINDS + ('composite',)}, "
                         f"got {kind!r}")
    missing = [p for p in _NEED[kind] if p not in e]
    if missing:
        raise ValueError(f"claims.toml: {where} ({kind}) lacks {missing}")
    if kind == "deterministic" and not all(
            isinstance(e.get(k), list) and len(e[k]) == 2 for k in ("holds", "in_part") if k in e):
        raise ValueError(f"claims.toml: {where}: a deterministic rule's holds/in_part are one "
                         f"[op, bound] each (several quantities: a composite of parts)")
    if kind == "ratio" and not e["T"] > 1:
        raise ValueError(f"claims.toml: {where}: T must be above 1, got {e['T']!r}")


def registry(path) -> dict[str, dict]:
    """The claims registry at ``path`` (TOML), each entry checked: a statement, source, quantity,
    expected evidence and history; a known kind with its parameters (a ``composite`` entry: each
    of its ``parts``). Returns ``{key: entry}``."""
    import tomllib
    with open(path, "rb") as f:
        claims = tomllib.load(f).get("claims", {})
    for key, e in claims.items():
        for name in ("statement", "source", "quantity", "evidence", "kind", "history"):
            if name not in e:
                raise ValueError(f"claims.toml: {key} has no {name!r}")
        if e["kind"] == "composite":
            if not e.get("parts"):
                raise ValueError(f"claims.toml: {key} is composite without parts")
            for name, part in e["parts"].items():
                _check_rule(f"{key}, part {name!r}", part)
        else:
            _check_rule(key, e)
        if not e["history"] or not all({"date", "change", "why"} <= set(h) for h in e["history"]):
            raise ValueError(f"claims.toml: {key}: history must list {{date, change, why}} entries")
    return claims


def _one(where: str, e: dict, data: dict) -> Judged:
    kind = e["kind"]
    want = {"ratio": {"rounds"}, "parity": {"gaps"}, "bound": {"estimate", "se"},
            "deterministic": {"value"}}[kind]
    if set(data) != want:
        raise ValueError(f"{where} is a {kind} claim: give {sorted(want)}, got {sorted(data)}")
    if kind == "ratio":
        return ratio(data["rounds"], e["T"])
    if kind == "parity":
        return parity(data["gaps"], e["tolerance"])
    if kind == "bound":
        return bound(data["estimate"], data["se"], e["op"], e["limit"])
    return deterministic(data["value"], _spec(e["holds"]), _spec(e.get("in_part")))


def judge(key: str, entry: dict, data: dict) -> Judged:
    """The registered ``entry`` of claim ``key`` judged on the runs' ``data``: ``rounds`` (a
    ratio claim: one ratio per interleaved round), ``gaps`` (parity: one gap per seed),
    ``estimate`` and ``se`` (bound), ``value`` (deterministic); a composite claim takes
    ``{part: data}`` for each of its parts, its verdict the weakest part's, the parts in
    ``extra``."""
    if entry["kind"] != "composite":
        return _one(key, entry, data)
    parts = entry["parts"]
    if set(data) != set(parts):
        raise ValueError(f"{key} is composite: give data for the parts {sorted(parts)}, got {sorted(data)}")
    each = {name: _one(f"{key}, part {name!r}", p, data[name]) for name, p in parts.items()}
    v = weakest(j.verdict for j in each.values())
    note = "; ".join(f"{name}: {j.note}" for name, j in each.items() if j.verdict == v and j.note)
    return Judged(v, math.nan, math.nan, math.nan, min(j.n for j in each.values()), note, each)


def _decide(rule: dict, est: float, low: float, high: float) -> str:
    """The verdict a rule gives an estimate and its 95% interval (module docstring): the one
    decision behind :func:`ratio`, :func:`parity`, :func:`bound` and :func:`reread`."""
    kind = rule["kind"]
    if kind == "ratio":
        return VERDICTS[0 if low >= rule["T"] else 1 if low > 1 else 2]
    if kind == "parity":
        return VERDICTS[0 if high <= rule["tolerance"] else 1 if est <= rule["tolerance"] else 2]
    if kind == "bound":
        holds = _OPS[rule["op"]]
        far, near = (high, low) if rule["op"] == "<=" else (low, high)
        return VERDICTS[0 if holds(far, rule["limit"]) else 2 if not holds(near, rule["limit"]) else 1]
    return verdict(est, _spec(rule["holds"]), _spec(rule.get("in_part")))


def _spec(t):
    return None if t is None else (t[0], t[1])


def reread(rule: dict, judged: dict) -> str:
    """The verdict a stored record's rule gives for its stored estimate and interval (a
    reader's check that the verdict follows from the numbers shown; ``judged`` as
    :func:`lab.claims.registered` stores it)."""
    return _decide(rule, judged["estimate"], judged["low"], judged["high"])
