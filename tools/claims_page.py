"""Generate the book's claims scorecard from the notebooks' stored outputs: ``book/claims.md``.

    python tools/claims_page.py            # (re)write book/claims.md
    python tools/claims_page.py --check    # exit 1 if the committed page is stale

A chapter records each paper claim it tests with ``lab.nb.claim(...)`` in the cell that asserts
it; the call displays it (markdown for the reader, the record in the output's metadata for
this script). Nothing here re-runs anything or types a number: the rows are the records the
notebooks hold as the book stores them, in the table of contents' order, so the page cannot
disagree with its chapters (``tests/test_claims_page.py`` checks that it is fresh, and that every
``claim(`` call in a notebook left exactly one record).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "book" / "claims.md"
# every recorded re-execution of the notebooks, with the claims whose verdict moved
# (pytest --nbval-lax book --claim-moves book/claim_moves.json; book/conftest.py)
MOVES = ROOT / "book" / "claim_moves.json"
sys.path.insert(0, str(ROOT))
from lab.nb import CLAIM_KEY, VERDICTS, stored_claims  # noqa: E402,F401

CALL = re.compile(r"(?<![\w.])claim\(")


@dataclass
class Claim:
    docname: str    # book/07_p3/02_speedup_and_ablation
    part: str       # the table of contents' caption of its part
    record: dict


def parts() -> list[tuple[str, list[str]]]:
    """(caption, [docname, ...]) for every part of _toc.yml, in order."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf8"))

    def files(entries):
        for e in entries or []:
            if "file" in e:
                yield e["file"]
            yield from files(e.get("sections"))
    return [(p.get("caption", ""), list(files(p.get("chapters")))) for p in toc.get("parts", [])]


def records(path: Path) -> list[dict]:
    """The claim records stored in one notebook's outputs, in cell order."""
    return stored_claims(path)


def calls(path: Path) -> int:
    """How many ``claim(`` calls the notebook's code cells make."""
    nb = json.loads(path.read_text(encoding="utf8"))
    return sum(len(CALL.findall("".join(c["source"]))) for c in nb["cells"]
               if c["cell_type"] == "code")


def scan() -> list[Claim]:
    found = []
    for caption, docs in parts():
        for doc in docs:
            path = ROOT / f"{doc}.ipynb"
            if path.exists():
                found += [Claim(doc, caption, r) for r in records(path)]
    return found


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


INTRO = """\
Every headline claim of a surveyed paper or seed system that this book tests: what the paper
reports, what the book measured, on what evidence, and a verdict, **holds**, **holds in part** or
**does not hold here**. No verdict is typed and no chapter sets its own bar: each claim has an
entry in the registry `book/claims.toml`, written before the runs that judge it, with the
paper's statement and source and one decision rule of four kinds (`lab.rules`):

- **ratio** (a speedup, a byte or time reduction): the median of at least 9 interleaved rounds
  (25 where the registered effect T is below 10%) and its 95% interval from order statistics;
  holds if the interval's low end reaches T, holds in part if it is above 1, else does not hold
  here (a loss if the whole interval is below 1, else inconclusive);
- **parity** ("no worse than"): the gap to the baseline over at least 3 seeds with its 95%
  Student-t interval; holds if the upper end is within the registered tolerance, in part if the
  mean is;
- **bound** (a variance bound, unbiasedness, an identity): a Monte Carlo or exact estimate and its
  standard error; holds if the bound holds at the far 95% end, does not hold if it fails at the
  near end, else in part;
- **deterministic** (ledger bytes, a modeled clock, a formula): one run decides.

Each entry's `history` lists every change to its rule, with the date and why (a test walks git
history and fails where a rule changed without one); its card shows it. The rows are generated
by `python tools/claims_page.py` from the records the chapters leave in their stored outputs, so
each is what its chapter measured when the book was last executed, and CI re-judges every claim
on each re-execution. "Here" means the book's small models on a few CPU ranks: a claim that does
not hold here may still hold at the paper's scale, and the card says why it differs."""


def _kinds() -> list[str]:
    """The evidence kinds, defined once (lab.claims.SUBSTRATES)."""
    from lab.claims import SUBSTRATES
    return ["| Evidence | What it is |", "|---|---|"] + [
        f"| {k} | {_cell(v)} |" for k, v in SUBSTRATES.items()] + [
        "", "Byte claims also say which bytes: those *handed over* to a collective, or those "
        "*on the wire* under its algorithm. Where the numbers come from training runs, the card "
        "adds what the runs themselves recorded of their link, clock and bytes.", ""]


def fixed(r: dict) -> bool:
    """A verdict that cannot change by construction: a closed-form computation."""
    return r.get("substrate") == "formula"


def _evidence(r: dict) -> str:
    if r.get("registered"):
        from lab.nb import evidence_text
        return evidence_text(r)
    if "substrate" not in r:
        return "typed verdict (not yet computed)"
    size = r["size"]
    runs = f"{size['runs']} run(s) x {size['seeds']} seed(s)" + (f" x {size['steps']} steps"
                                                                if size["steps"] else "")
    return f"{r['substrate']}, {runs}" + (f"; bytes {r['bytes']}" if r.get("bytes") else "")


def _test(r: dict) -> str:
    if r.get("registered"):
        from lab.nb import test_text
        return test_text(r)
    if "quantity" not in r:
        return ""
    from lab.nb import _show, _thresholds
    text = f"{r['quantity']} = {_show(r['value'], r['holds'], r.get('in_part'))}; holds if {_thresholds(r['holds'])}"
    return text + (f"; in part if {_thresholds(r['in_part'])}" if r.get("in_part") else "")


def moves() -> dict[str, tuple[int, list[dict]]]:
    """By claim key: (re-executions recorded that compared it, the moves among them)."""
    runs = json.loads(MOVES.read_text(encoding="utf8"))["runs"] if MOVES.exists() else []
    out: dict[str, tuple[int, list[dict]]] = {}
    for run in runs:
        for key in run["compared"]:
            n, ms = out.get(key, (0, []))
            out[key] = (n + 1, ms + [dict(m, date=run["date"], by=run["by"])
                                     for m in run["moved"] if m["key"] == key])
    return out


def _moved(key: str, seen: dict) -> str:
    n, ms = seen.get(key, (0, []))
    if not n:
        return ""
    if not ms:
        return f"same verdict in {n} recorded re-execution(s)"
    from lab.nb import _show
    each = "; ".join(f"{m['date']} ({m['by']}): {m['fresh']['verdict']} at {_show(m['fresh']['value'])}"
                     for m in ms)
    return f"moved under load in {len(ms)} of {n} recorded re-execution(s): {each}"


REGISTRY = ROOT / "book" / "claims.toml"


def _rule_text(e: dict) -> str:
    """A registered rule in words: its kind and parameters."""
    kind = e["kind"]
    if kind == "composite":
        return "; ".join(f"{name}: {_rule_text(p)}" for name, p in e["parts"].items())
    if kind == "ratio":
        return f"ratio, T = {e['T']:g} ({e['T_source']})"
    if kind == "parity":
        return f"parity, tolerance {e['tolerance']:g} ({e['tolerance_source']})"
    if kind == "bound":
        return f"bound {e['op']} {e['limit']:g}" + (f" ({e['limit_source']})" if e.get("limit_source") else "")
    return "deterministic, one run"


def _registered(key: str, reg: dict) -> list[str]:
    e = reg.get(key)
    if e is None:
        return ["- **Registered rule:** none (not in book/claims.toml)"]
    reads = "the chapter judges by it" if e.get("notebook_reads_rule") else \
        "registered; the chapter still judges by its own thresholds until it is migrated"
    hist = "; ".join(f"{h['date']}: {h['change']}" for h in e["history"])
    return [f"- **Registered rule:** {_cell(_rule_text(e))}; {reads}",
            f"- **History:** {_cell(hist)}"]


def _card(c: Claim, seen: dict | None = None, reg: dict | None = None) -> list[str]:
    r = c.record
    sub = r.get("substrate", "typed")
    mark = " (by construction: a closed-form computation, the same verdict on every machine)" \
        if fixed(r) else ""
    lines = [f'<div class="claim-card" data-verdict="{r["verdict"]}" data-substrate="{sub}" '
             f'data-part="{_cell(c.part)}">', "", f"**`{r['key']}`: {r['verdict']}**{mark}"
             + (f" ({_cell(r['why'])})" if r.get("why") else ""), "",
             f"- **Paper:** {_cell(r['paper'])}", f"- **Claimed:** {_cell(r['claimed'])}",
             f"- **Measured:** {_cell(r['measured'])}"]
    if _test(r):
        lines.append(f"- **Test:** {_cell(_test(r))}")
    lines.append(f"- **Evidence:** {_cell(_evidence(r))}")
    m = r.get("margin")
    if m:
        hist = "; ".join(f"{h.get('value')} until {h.get('date', '?')} ({h.get('why', '')})"
                         for h in m.get("history", []))
        lines.append(f"- **Margin:** {_cell(m.get('what', ''))} from {m.get('runs', '?')} runs "
                     f"(spread {m.get('spread', '?')}) on {_cell(m.get('machine', '?'))}, "
                     f"{m.get('date', '?')}" + (f"; earlier: {_cell(hist)}" if hist else ""))
    if reg is not None:
        lines += _registered(r["key"], reg)
    if _moved(r["key"], seen or {}):
        lines.append(f"- **Re-executed:** {_cell(_moved(r['key'], seen))}")
    lines += [f"- **Chapter:** {{doc}}`/{c.docname}`", "", "</div>", ""]
    return lines


def _table(title: str, groups: dict[str, list[Claim]]) -> list[str]:
    """Claims by group x verdict; those fixed by construction in a column of their own."""
    lines = [f"| {title} | " + " | ".join(VERDICTS) + " | by construction | all |",
             "|---|" + "---|" * (len(VERDICTS) + 2)]
    rows = list(groups.items()) + [("**all**", [c for cs in groups.values() for c in cs])]
    for name, cs in rows:
        row = [sum(c.record["verdict"] == v and not fixed(c.record) for c in cs) for v in VERDICTS]
        row.append(sum(fixed(c.record) for c in cs))
        lines.append(f"| {_cell(name)} | " + " | ".join(map(str, row)) + f" | {sum(row)} |")
    return lines + [""]


def _group(claims: list[Claim], key) -> dict[str, list[Claim]]:
    out: dict[str, list[Claim]] = {}
    for c in claims:
        out.setdefault(key(c), []).append(c)
    return out


def _kind(c: Claim) -> str:
    rule = c.record.get("rule")
    return rule["kind"] if rule else "own thresholds (not yet migrated)"


def render() -> str:
    found = scan()
    keys = [c.record["key"] for c in found]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise ValueError(f"claim keys must be unique in the book; repeated: {dup}")
    claims = [c for c in found if not c.record.get("target")]
    targets = [c for c in found if c.record.get("target")]
    count = {v: sum(c.record["verdict"] == v for c in claims) for v in VERDICTS}
    seen = moves()
    from lab.rules import registry
    reg = registry(REGISTRY)
    moved = ", ".join(f"`{c.record['key']}`" for c in found if seen.get(c.record["key"], (0, []))[1])
    runs = len(json.loads(MOVES.read_text(encoding="utf8"))["runs"]) if MOVES.exists() else 0
    lines = ["# Claims scorecard", "", INTRO, "",
             f"{len(claims)} paper claims: " + ", ".join(f"{n} {v}" for v, n in count.items())
             + f"; and {len(targets)} of the book's own targets, apart below. Of the paper claims, "
             + f"{sum(fixed(c.record) for c in claims)} are decided by a closed-form computation, "
             "one run and no noise, so their verdicts cannot change with the machine, only with the "
             "code; the tables count them apart: "
             + ", ".join(f"`{c.record['key']}`" for c in claims if fixed(c.record)) + ". "
             + f"{sum(bool(c.record.get('registered')) for c in found)} of the {len(found)} records "
             "are judged by their registered rule; "
             + (", ".join(f"`{c.record['key']}`" for c in found if not c.record.get("registered"))
                + " still by thresholds their chapter declared after its results were stored "
                "(their cards say so)." if any(not c.record.get("registered") for c in found)
                else "none declares thresholds of its own."), "",
             f"Re-executed and re-judged {runs} time(s) on record (CI re-judges every claim on "
             "each run: a steady quantity must keep its verdict, measured time may move one "
             f"step); moved under load: {moved or 'none'}.", "",
             f"The registry, `book/claims.toml`, holds {len(reg)} entries, each with its decision "
             "rule (ratio, parity, bound or deterministic; `lab.rules`) and its history: "
             f"{sum(k in {c.record['key'] for c in found} for k in reg)} for the claims below and "
             f"{sum(k not in {c.record['key'] for c in found} for k in reg)} registered for "
             "experiments not yet run: "
             + ", ".join(f"`{k}`" for k in reg if k not in {c.record["key"] for c in found}) + ".", "",
             "## By part", "", *_table("Part", _group(claims, lambda c: c.part)),
             "## By evidence", "", *_table("Evidence", _group(claims, lambda c: c.record.get("substrate", "typed"))),
             *_kinds(),
             "## By rule", "", *_table("Rule", _group(claims, _kind)),
             '<div id="claim-filters"></div>', ""]
    for caption in dict.fromkeys(c.part for c in claims):
        lines += [f"## {caption}", ""]
        for c in (c for c in claims if c.part == caption):
            lines += _card(c, seen, reg)
    if targets:
        lines += ["## The book's own targets", "",
                  "Not paper claims: goals the book set itself (the method advisor's accuracy on "
                  "held-out configurations, the map's coverage). They are checked the same way "
                  "and counted apart.", ""]
        for c in targets:
            lines += _card(c, seen, reg)
    return "\n".join(lines).rstrip() + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if book/claims.md is stale")
    args = ap.parse_args(argv)
    page = render()
    if args.check:
        if OUT.read_text(encoding="utf8") != page:
            print("book/claims.md is stale: run python tools/claims_page.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(page, encoding="utf8")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
