"""The claims scorecard is generated from the chapters' stored claim records and cannot go stale.

book/claims.md is written by tools/claims_page.py from the ``lab.nb.claim`` records in the
notebooks' stored outputs. The committed page must equal a fresh generation; every ``claim(``
call in a notebook must have left exactly one record (so no claim cell was left unexecuted or
failed); the helper itself refuses an unsupported verdict. Nothing here runs a notebook.
"""
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
    assert {"02", "03", "04", "05", "06"} <= parts, parts
    for c in claims:
        r = c.record
        assert r["verdict"] in VERDICTS and r["measured"] and r["paper"], r
        assert r["verdict"] == "holds" or r["why"], r
    page = cp.OUT.read_text(encoding="utf8")
    for c in claims:
        assert f"`{c.record['key']}`" in page and f"/{c.docname}`" in page


def test_claim_asserts_the_measured_fact_and_checks_its_arguments(monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display",
                        lambda obj, metadata=None, raw=False: shown.append({**obj, **metadata}))
    kw = dict(paper="A et al. 2020", claimed="x is small", measured="x = 0.1")
    claim("t-ok", **kw, verdict="holds", check=True)
    assert shown[-1][CLAIM_KEY]["key"] == "t-ok" and "x = 0.1" in shown[-1]["text/markdown"]
    with pytest.raises(AssertionError, match="t-bad"):
        claim("t-bad", **kw, verdict="holds", check=False)
    with pytest.raises(ValueError, match="verdict"):
        claim("t-v", **kw, verdict="true", check=True)
    with pytest.raises(ValueError, match="why"):
        claim("t-w", **kw, verdict="holds in part", check=True)
    with pytest.raises(ValueError, match="measured"):
        claim("t-m", **{**kw, "measured": ""}, verdict="holds", check=True)
    assert len(shown) == 1


def test_page_flags_repeated_keys(monkeypatch):
    rec = {"key": "k", "paper": "p", "claimed": "c", "measured": "m", "verdict": "holds", "why": ""}
    monkeypatch.setattr(cp, "scan", lambda: [cp.Claim("book/a", "A", rec), cp.Claim("book/b", "B", rec)])
    with pytest.raises(ValueError, match="unique"):
        cp.render()
