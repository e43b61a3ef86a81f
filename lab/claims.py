"""Paper claims checked by the book: the record a claim cell leaves, and its re-judging.

Each claim the book tests has an entry in the registry ``book/claims.toml``, written before the
runs that judge it: the paper's statement and source, the quantity, and one decision rule
(:mod:`lab.rules`: ratio, parity, bound or deterministic, or a composite of them). A chapter
calls ``lab.nb.claim(key, rounds=... | gaps=... | estimate=..., se=... | value=... | parts=...)``
with what its runs measured; :func:`registered` builds the record, its verdict and interval the
rule's, the evidence (substrate; runs x seeds x steps, counting runs, not evaluations; for bytes,
those *handed over* to a collective or those *on the wire*) the chapter's, with what
:func:`evidence` read from the runs' histories. No verdict is typed and no chapter declares a
threshold of its own; ``lab.nb.claim`` displays the record and stores it in the cell's output,
from which ``tools/claims_page.py`` builds the scorecard.

:func:`record` is the older form, a verdict from thresholds the chapter declares (``(op, bound)``
with ``op`` one of ``>=``, ``>``, ``<=``, ``<``; a dict of them for several quantities): the
book's first 45 claims used it, their thresholds written when the results were already stored
(issue 48), and the registry's history keeps them.
"""
from __future__ import annotations

import math
import operator

VERDICTS = ("holds", "holds in part", "does not hold here")
#: where a claim's number comes from (the page filters by it)
SUBSTRATES = {
    "kernel link": "times measured with the bytes on a kernel-shaped link (network namespaces)",
    "modeled link": "times measured on the emulated link: the alpha-beta model plus this "
                    "machine's own cost",
    "modeled clock": "measured compute with each exchange's alpha-beta time summed in",
    "measured": "accuracy, loss or CPU time of real runs on this machine, no link involved",
    "emulator": "losses of a one-process emulation that computes what the multi-process runner "
                "does, to float rounding (lab.pipeline.emulate): no clock, no bytes",
    "ledger": "bytes counted by the ledger from the tensors of real runs",
    "formula": "a closed-form computation",
    "Monte Carlo": "repeated random draws",
    "stored grid": "a stored measurement file, with the machine and date that made it",
}
BYTES = ("handed over", "on the wire")
_OPS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}


def _check_threshold(name: str, t) -> None:
    if not (isinstance(t, tuple) and len(t) == 2 and t[0] in _OPS
            and isinstance(t[1], (int, float)) and not isinstance(t[1], bool)
            and math.isfinite(t[1])):
        raise ValueError(f"{name} must be (op, bound) with op one of {tuple(_OPS)} and a finite "
                         f"bound, got {t!r}")


def _conditions(name: str, spec, value) -> dict:
    """``spec`` as ``{quantity: (op, bound)}`` against ``value`` (a number or a dict)."""
    if spec is None:
        return {}
    if isinstance(value, dict):
        if not isinstance(spec, dict) or not spec:
            raise ValueError(f"{name}: value is a dict of quantities, so {name} must be a dict "
                             f"of (op, bound) by quantity, got {spec!r}")
        missing = set(spec) - set(value)
        if missing:
            raise ValueError(f"{name} names quantities the value lacks: {sorted(missing)}")
    elif isinstance(spec, dict):
        raise ValueError(f"{name} is a dict, but value is one number")
    spec = spec if isinstance(spec, dict) else {"value": spec}
    for q, t in spec.items():
        _check_threshold(f"{name}[{q!r}]", t)
    return spec


def _passes(spec: dict, value) -> bool:
    vals = value if isinstance(value, dict) else {"value": value}
    return all(_OPS[op](float(vals[q]), bound) for q, (op, bound) in spec.items())


def verdict(value, holds, in_part=None) -> str:
    """The verdict for ``value``: "holds" where every ``holds`` threshold passes, else "holds in
    part" where every ``in_part`` one does, else "does not hold here"."""
    h = _conditions("holds", holds, value)
    if not h:
        raise ValueError("a claim needs its holds thresholds")
    p = _conditions("in_part", in_part, value)
    if _passes(h, value):
        return VERDICTS[0]
    if p and _passes(p, value):
        return VERDICTS[1]
    return VERDICTS[2]


def record(key: str, *, paper: str, claimed: str, quantity: str, value, holds, in_part=None,
           substrate: str, runs: int, seeds: int = 1, steps: int | None = None,
           measured: str, bytes: str | None = None, why_part: str = "", why_not: str = "",
           margin: dict | None = None, target: bool = False, min_seeds: int = 1) -> dict:
    """A claim's record, its verdict computed (module docstring). ``measured`` says in words
    what the runs measured (built from their numbers); ``why_part``/``why_not`` why the claim
    would hold only in part / not here, written with the thresholds; the one
    the computed verdict needs must be given. ``margin``: where a threshold's margin came
    from (``spread``, ``runs``, ``machine``, ``date``, and ``history``: earlier values with
    why they changed). ``target``: one of the book's own targets, not a paper's claim.
    ``min_seeds``: the seeds a claim needs to *hold* (a parity claim whose margin is near the
    noise): with fewer its verdict is at most "holds in part", and says so."""
    for name, text in (("key", key), ("paper", paper), ("claimed", claimed),
                       ("quantity", quantity), ("measured", measured)):
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"{name} must be a non-empty string, got {text!r}")
    if substrate not in SUBSTRATES:
        raise ValueError(f"substrate must be one of {sorted(SUBSTRATES)}, got {substrate!r}")
    if bytes is not None and bytes not in BYTES:
        raise ValueError(f"bytes must be one of {BYTES} (or None), got {bytes!r}")
    for name, n in (("runs", runs), ("seeds", seeds)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"{name} must be an int >= 1, got {n!r}")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise ValueError(f"steps must be an int >= 1 or None, got {steps!r}")
    nums = value.values() if isinstance(value, dict) else [value]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
               for v in nums):
        raise ValueError(f"value must be a finite number or a dict of them, got {value!r}")
    v = verdict(value, holds, in_part)
    why = {"holds": "", "holds in part": why_part, "does not hold here": why_not}[v]
    if v == VERDICTS[0] and seeds < min_seeds:
        v, why = VERDICTS[1], f"the thresholds pass, on {seeds} seed(s); holding needs {min_seeds}"
    if v != "holds" and not why.strip():
        raise ValueError(f"claim {key!r} computes {v!r}: give why_{'part' if v == VERDICTS[1] else 'not'}")
    fmt = (lambda s: s if isinstance(s, dict) else {"value": s})
    return {"key": key, "paper": paper, "claimed": claimed, "quantity": quantity,
            "value": value if isinstance(value, dict) else float(value),
            "holds": {q: list(t) for q, t in fmt(holds).items()},
            "in_part": None if in_part is None else {q: list(t) for q, t in fmt(in_part).items()},
            "verdict": v, "why": why, "measured": measured, "substrate": substrate,
            "size": {"runs": runs, "seeds": seeds, "steps": steps}, "bytes": bytes,
            "margin": margin, "target": bool(target), "min_seeds": min_seeds}


def _judged(j) -> dict:
    return {"estimate": j.estimate, "low": j.low, "high": j.high, "n": j.n, "note": j.note}


def registered(key: str, entry: dict, judged, *, measured: str, substrate: str, runs: int,
               seeds: int = 1, steps: int | None = None, bytes: str | None = None,
               why: str = "", evidence: dict | None = None, target: bool = False) -> dict:
    """A claim's record judged by its registered rule (``entry`` from ``book/claims.toml``,
    ``judged`` from :func:`lab.rules.judge`): the statement, source and quantity are the
    registry's; the verdict, interval and sample size the rule's; ``why`` adds the chapter's
    reading of the outcome to the rule's own note; ``evidence`` is what
    :func:`evidence` read from the runs."""
    from .rules import rule_of
    rec = record(key, paper=entry["source"], claimed=entry["statement"],
                 quantity=entry["quantity"], value=0.0, holds=(">=", 0), substrate=substrate,
                 runs=runs, seeds=seeds, steps=steps, measured=measured, bytes=bytes,
                 target=target)
    parts = judged.extra
    rec.update(value={k: p.estimate for k, p in parts.items()} if parts else judged.estimate,
               holds=None, in_part=None, verdict=judged.verdict,
               why="; ".join(t for t in (judged.note, why.strip()) if t),
               rule={k: (list(v) if isinstance(v, tuple) else v) for k, v in rule_of(entry).items()},
               judged=None if parts else _judged(judged), parts={k: _judged(p) for k, p in parts.items()} or None,
               evidence=evidence, registered=True)
    return rec


def evidence(runs, clock: str = "measured", bytes: str | None = None, column=None) -> dict:
    """The evidence behind a claim, read from the runs it is given: each a
    :class:`lab.train.History`, or a benchmark row carrying its ``made`` entry
    (:mod:`lab.bench.made`), whose ``column`` (a name, or several) is the number the claim
    takes (its clock and bytes kinds are read from the row, not from ``clock``/``bytes``).
    Per field (link, clock, bytes) the one value all runs share, or ``"mixed: a, b"`` where
    they differ; plus ``runs``, how many runs (not evaluations), or ``rows``, how many
    benchmark rows (each a measurement of its own)."""
    runs = list(runs)
    each = [_row_evidence(r, column) if isinstance(r, dict) else r.evidence(clock, bytes)
            for r in runs]
    if not each:
        raise ValueError("evidence needs at least one run")
    out = {}
    for k in each[0]:
        vals = {e[k] for e in each}
        out[k] = vals.pop() if len(vals) == 1 else "mixed: " + ", ".join(sorted(map(str, vals)))
    rows = sum(isinstance(r, dict) for r in runs)
    return {**out, **({"runs": len(runs) - rows} if rows < len(runs) else {}),
            **({"rows": rows} if rows else {})}


def _row_evidence(row: dict, column) -> dict:
    """A benchmark row's evidence for the number(s) in ``column``, from its ``made`` entry."""
    made = row.get("made")
    if made is None:
        raise ValueError(f"evidence: a benchmark row without its 'made' entry (keys {sorted(row)}); "
                         "rows made before lab.bench.made carry none: re-run the benchmark")
    cols = [column] if isinstance(column, str) else list(column or ())
    if not cols:
        raise ValueError("evidence: give column=, the row's number the claim takes")
    missing = [c for c in cols if c not in row]
    if missing:
        raise ValueError(f"evidence: column {missing[0]!r} is not in the row (keys {sorted(row)})")
    kinds = {k: {made[k].get(c) for c in cols} - {None} for k in ("clock", "bytes")}
    one = lambda v: None if not v else v.pop() if len(v) == 1 else " + ".join(sorted(v))  # noqa: E731
    return {"link": made["link"], "clock": one(kinds["clock"]), "bytes": one(kinds["bytes"])}


# -- re-execution: a fresh verdict against the stored one ------------------------------------
#: substrates whose numbers do not move with the machine: a re-run must give the same verdict
STEADY = ("ledger", "formula", "Monte Carlo", "stored grid")
LOG_ENV = "LAB_CLAIM_LOG"  # a folder: lab.nb.claim appends each record it computes there


def steps_apart(a: str, b: str) -> int:
    """How many verdict steps (holds / holds in part / does not hold here) lie between two."""
    return abs(VERDICTS.index(a) - VERDICTS.index(b))


def compare(stored: dict, fresh: dict) -> dict:
    """One claim re-judged: ``stored`` (the committed notebook's record) against ``fresh`` (the
    record a re-execution computed). ``outcome`` is ``same``; ``moved`` (on a substrate that
    moves with the machine's load: one step, or two where both records' 95% intervals overlap;
    reported, allowed); or ``failed`` (a steady substrate's verdict changed, or a move of two
    steps whose intervals are disjoint or absent)."""
    steps = steps_apart(stored["verdict"], fresh["verdict"])
    steady = stored.get("substrate") in STEADY or fresh.get("substrate") in STEADY
    if steps == 0:
        outcome = "same"
    elif not steady and (steps == 1 or _overlap(stored, fresh)):
        outcome = "moved"
    else:
        outcome = "failed"
    return {"key": fresh["key"], "outcome": outcome, "steps": steps, "steady": steady,
            "stored": {k: stored.get(k) for k in ("verdict", "value", "substrate")},
            "fresh": {k: fresh.get(k) for k in ("verdict", "value", "substrate")}}


def _intervals(rec: dict) -> list:
    if rec.get("parts"):
        return [(k, j["low"], j["high"]) for k, j in sorted(rec["parts"].items())]
    j = rec.get("judged")
    return [("", j["low"], j["high"])] if j else []


def _overlap(stored: dict, fresh: dict) -> bool:
    """Two registered records of one measured quantity whose 95% intervals overlap, part by
    part: the runs agree within their noise even where the verdict moved two steps (from
    "holds" to "inconclusive"); without intervals, or where one pair is disjoint, they do not."""
    a, b = _intervals(stored), _intervals(fresh)
    return bool(a) and [k for k, *_ in a] == [k for k, *_ in b] and all(
        lo1 <= hi2 and lo2 <= hi1 for (_, lo1, hi1), (_, lo2, hi2) in zip(a, b))


def log(rec: dict) -> None:
    """Append ``rec`` to the folder ``$LAB_CLAIM_LOG`` names (one file per process), if set."""
    import json
    import os
    folder = os.environ.get(LOG_ENV)
    if not folder:
        return
    with open(os.path.join(folder, f"claims-{os.getpid()}.jsonl"), "a", encoding="utf8") as f:
        f.write(json.dumps(rec) + "\n")


def logged(folder) -> list[dict]:
    """Every record in a ``$LAB_CLAIM_LOG`` folder."""
    import json
    import pathlib
    return [json.loads(line) for p in sorted(pathlib.Path(folder).glob("claims-*.jsonl"))
            for line in p.read_text(encoding="utf8").splitlines() if line.strip()]
