"""The claims scorecard is generated from the chapters' stored claim records and cannot go stale.

book/claims.md is written by tools/claims_page.py from the ``lab.nb.claim`` records in the
notebooks' stored outputs. The committed page must equal a fresh generation; every ``claim(``
call in a notebook must have left exactly one record (so no claim cell was left unexecuted or
failed); the helper itself refuses an unsupported verdict. Nothing here runs a notebook.
"""
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import claims_page as cp  # noqa: E402

from lab.nb import CLAIM_KEY, VERDICTS, claim  # noqa: E402


def test_committed_page_equals_a_fresh_generation():
    assert cp.OUT.read_text(encoding="utf8") == cp.render(), (
        "book/claims.md is stale: run python tools/claims_page.py")


def test_every_claim_call_left_one_record():
    for part, docs in cp.parts():
        for doc in docs:
            path = ROOT / f"{doc}.ipynb"
            if path.exists():
                assert len(cp.records(path)) == cp.calls(path), (
                    f"{doc}: {cp.calls(path)} claim() calls, {len(cp.records(path))} stored records;"
                    " re-execute the notebook")


def test_the_book_tests_claims_from_every_part_with_a_survey_or_seed_system():
    claims = cp.scan()
    assert len(claims) >= 20
    parts = {c.docname.split("/")[1][:2] for c in claims}
    assert {"01", "02", "03", "04", "05", "06"} <= parts, parts
    for c in claims:
        r = c.record
        assert r["verdict"] in VERDICTS and r["measured"] and r["paper"], r
        assert r["verdict"] == "holds" or r["why"], r
    page = cp.OUT.read_text(encoding="utf8")
    for c in claims:
        assert f"`{c.record['key']}`" in page and f"/{c.docname}`" in page


def test_every_verdict_is_computed_from_declared_thresholds_and_evidence():
    """No chapter types a verdict: each claim declares its quantity, thresholds and evidence,
    and its stored verdict is what those thresholds give for its stored value."""
    from lab.claims import SUBSTRATES, VERDICTS, verdict
    typed = [c.record["key"] for c in cp.scan() if "quantity" not in c.record]
    assert not typed, f"claims with a typed verdict: {typed}"
    from lab.rules import reread
    for c in cp.scan():
        r = c.record
        assert r["substrate"] in SUBSTRATES and r["size"]["runs"] >= 1, r["key"]
        if r.get("registered"):   # the registered rule, reread from the stored interval(s)
            each = [reread(r["rule"]["parts"][k], j) for k, j in r["parts"].items()] \
                if r.get("parts") else [reread(r["rule"], r["judged"])]
            assert r["verdict"] == max(each, key=VERDICTS.index), r["key"]
            continue
        holds = {q: tuple(t) for q, t in r["holds"].items()}
        part = None if r["in_part"] is None else {q: tuple(t) for q, t in r["in_part"].items()}
        one = list(holds) == ["value"]
        want = verdict(r["value"], holds["value"] if one else holds,
                       (part or {}).get("value") if one else part)
        if want == "holds" and r["size"]["seeds"] < r.get("min_seeds", 1):
            want = "holds in part"   # the thresholds pass on fewer seeds than the claim needs
        assert r["verdict"] == want, r["key"]
    for part_, docs in cp.parts():
        for doc in docs:
            path = ROOT / f"{doc}.ipynb"
            if path.exists():
                code = "".join(line for cell in json.loads(path.read_text(encoding="utf8"))["cells"]
                               if cell["cell_type"] == "code" for line in cell["source"])
                assert not re.search(r"\bverdict\s*=", code), f"{doc}: a claim( call types its verdict"


def test_claim_computes_its_verdict_and_checks_its_arguments(monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display",
                        lambda obj, metadata=None, raw=False: shown.append({**obj, **metadata}))
    kw = dict(paper="A et al. 2020", claimed="x is small", quantity="x", substrate="formula",
              runs=1, measured="x = 0.1", why_part="x is smallish", why_not="x is large")
    def judged(key, **k):
        assert claim(key, **k, **kw) is None      # nothing returned: no dict on the page
        return shown[-1][CLAIM_KEY]["verdict"]
    assert judged("t-ok", value=0.1, holds=("<=", 0.2)) == "holds"
    assert shown[-1][CLAIM_KEY]["key"] == "t-ok" and "x = 0.1" in shown[-1]["text/markdown"]
    assert judged("t-part", value=0.3, holds=("<=", 0.2), in_part=("<=", 0.5)) == "holds in part"
    assert judged("t-not", value=0.9, holds=("<=", 0.2), in_part=("<=", 0.5)) == "does not hold here"
    assert judged("t-two", value={"a": 1.0, "b": 5.0}, holds={"a": (">=", 1), "b": ("<", 2)},
                  in_part={"a": (">=", 1)}) == "holds in part"
    with pytest.raises(AssertionError, match="t-bad"):
        claim("t-bad", value=0.1, holds=("<=", 0.2), check=False, **kw)
    with pytest.raises(ValueError, match="holds"):
        claim("t-none", value=0.1, holds=None, **kw)
    with pytest.raises(ValueError, match="substrate"):
        claim("t-sub", value=0.1, holds=("<=", 0.2), **{**kw, "substrate": "vibes"})
    with pytest.raises(ValueError, match="why_not"):
        claim("t-why", value=0.9, holds=("<=", 0.2), **{**kw, "why_not": ""})
    with pytest.raises(ValueError, match="finite"):
        claim("t-nan", value=float("nan"), holds=("<=", 0.2), **kw)
    with pytest.raises(ValueError, match="op"):
        claim("t-op", value=0.1, holds=("~", 0.2), **kw)


def test_page_flags_repeated_keys(monkeypatch):
    rec = {"key": "k", "paper": "p", "claimed": "c", "measured": "m", "verdict": "holds", "why": ""}
    monkeypatch.setattr(cp, "scan", lambda: [cp.Claim("book/a", "A", rec), cp.Claim("book/b", "B", rec)])
    with pytest.raises(ValueError, match="unique"):
        cp.render()
