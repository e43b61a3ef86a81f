"""A migrated claim is judged by its registered rule (lab.nb.claim without thresholds,
lab.rules.judge, lab.claims.registered), and no assert in the book decides a verdict
(tools/claim_asserts.py)."""
import json
import math
import pathlib
import subprocess
import sys
from unittest import mock

import nbformat
import pytest
from lab import nb, rules

ROOT = pathlib.Path(__file__).resolve().parent.parent
HIST = '[{date = "2026-12-02", change = "registered", why = "a test"}]'
REG = f"""
[claims.faster]
statement = "A beats B"
source = "A. Author 2020, Table 1"
quantity = "B's time over A's"
evidence = "modeled link"
notebook = "x"
kind = "ratio"
T = 1.2
T_source = "the paper's own 1.2x"
history = {HIST}

[claims.both]
statement = "fewer bytes and the same accuracy"
source = "A. Author 2020, Table 2"
quantity = "bytes over the paper's, and the accuracy gap"
evidence = "ledger"
notebook = "x"
kind = "composite"
history = {HIST}
[claims.both.parts.bytes]
kind = "deterministic"
holds = ["<=", 0.01]
[claims.both.parts.accuracy]
kind = "parity"
tolerance = 0.02
tolerance_source = "the default"
"""


@pytest.fixture
def registry(tmp_path, monkeypatch):
    p = tmp_path / "claims.toml"
    p.write_text(REG)
    monkeypatch.setenv("LAB_CLAIMS", str(p))
    shown = []
    with mock.patch("IPython.display.display", lambda obj, **kw: shown.append((obj, kw))):
        yield shown


def _rec(shown):
    return shown[-1][1]["metadata"][nb.CLAIM_KEY]


def test_a_ratio_claim_takes_its_T_from_the_registry_and_the_interval_decides(registry):
    kw = dict(measured="nine rounds", substrate="modeled link", runs=18)
    assert nb.claim("faster", rounds=[1.3] * 9, **kw) is None      # nothing shown as a dict
    rec = _rec(registry)
    assert rec["verdict"] == "holds" and rec["rule"] == {"kind": "ratio", "T": 1.2}
    assert rec["claimed"] == "A beats B" and rec["judged"]["n"] == 9
    nb.claim("faster", rounds=[1.1] * 9, **kw)
    assert _rec(registry)["verdict"] == "holds in part"
    nb.claim("faster", rounds=[0.9, 0.95, 0.8, 0.85, 0.9, 0.92, 0.88, 0.9, 0.91], **kw)
    assert _rec(registry)["verdict"] == "does not hold here" and "a loss" in _rec(registry)["why"]
    with pytest.raises(ValueError, match="at least 9 rounds"):
        nb.claim("faster", rounds=[1.3] * 5, **kw)
    with pytest.raises(ValueError, match="give \\['rounds'\\]"):
        nb.claim("faster", gaps=[0.1] * 3, **kw)


def test_a_composite_claim_is_its_weakest_part(registry):
    nb.claim("both", parts={"bytes": {"value": 0.001}, "accuracy": {"gaps": [0.01, 0.03, 0.0]}},
             measured="three seeds", substrate="ledger", runs=3, seeds=3)
    rec = _rec(registry)
    assert rec["verdict"] == "holds in part" and rec["parts"]["bytes"]["estimate"] == 0.001
    assert math.isclose(rec["value"]["accuracy"], 0.04 / 3)
    assert "weakest" in nb.test_text(rec)
    with pytest.raises(ValueError, match="parts"):
        nb.claim("both", parts={"bytes": {"value": 0.001}}, measured="m", substrate="ledger", runs=1)


def test_an_unregistered_or_typed_claim_is_refused(registry):
    with pytest.raises(KeyError, match="not registered"):
        nb.claim("nobody", rounds=[1.3] * 9, measured="m", substrate="ledger", runs=1)
    with pytest.raises(TypeError, match="verdict="):
        nb.claim("faster", verdict="holds", measured="m", substrate="ledger", runs=1)


def test_judge_checks_every_rule_kind():
    e = {"kind": "bound", "op": "<=", "limit": 1.0}
    assert rules.judge("k", e, {"estimate": 0.5, "se": 0.1}).verdict == "holds"
    assert rules.judge("k", e, {"estimate": 0.95, "se": 0.1}).verdict == "holds in part"
    assert rules.judge("k", e, {"estimate": 1.5, "se": 0.1}).verdict == "does not hold here"
    d = {"kind": "deterministic", "holds": ["<", 1], "in_part": ["<", 2]}
    assert [rules.judge("k", d, {"value": v}).verdict for v in (0.5, 1.5, 3)] == list(rules.VERDICTS)


SCRATCH = [
    "x = [1.3] * 9\nok = sum(x) > 0",
    "assert min(x) > 1.2   # decides the verdict\nassert ok is True",
    "from lab.nb import claim\nspeed = x\nclaim('faster', rounds=speed, measured='m', substrate='ledger', runs=1, check=len(x) == 9)",
]


def test_the_scanner_finds_an_assert_and_a_check_on_a_claims_quantity(tmp_path):
    sys.path.insert(0, str(ROOT / "tools"))
    import claim_asserts
    book = nbformat.v4.new_notebook()
    book.cells = [nbformat.v4.new_code_cell(s) for s in SCRATCH]
    path = tmp_path / "n.ipynb"
    nbformat.write(book, path)
    found = claim_asserts.findings(path)
    assert [(k, c, t.split()[0]) for k, c, t in found] == [("faster", 2, "check=len(x)"),
                                                            ("faster", 1, "assert")]
    assert "min(x)" in found[1][2]


def test_no_assert_in_the_book_decides_a_claims_verdict():
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "claim_asserts.py")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-4000:]


def test_every_registered_record_agrees_with_its_registry_flag():
    reg = rules.registry(ROOT / "book" / "claims.toml")
    for p in sorted((ROOT / "book").rglob("*.ipynb")):
        for rec in nb.stored_claims(p):
            e = reg.get(rec["key"])
            assert e is not None, f"{rec['key']} ({p.name}) is not registered"
            assert bool(rec.get("registered")) == bool(e.get("notebook_reads_rule")), \
                f"{rec['key']}: notebook_reads_rule says {e.get('notebook_reads_rule')}"
            if rec.get("registered"):
                assert rec["rule"] == json.loads(json.dumps(rules.rule_of(e))), \
                    f"{rec['key']}: the stored record was judged by another rule than the registry's"


def test_a_two_step_move_is_noise_only_where_the_intervals_overlap():
    from lab.claims import compare
    rec = lambda v, lo, hi: {"key": "k", "verdict": v, "value": (lo + hi) / 2, "substrate": "modeled link",
                             "judged": {"estimate": (lo + hi) / 2, "low": lo, "high": hi, "n": 25}}
    assert compare(rec("holds", 1.14, 1.23), rec("does not hold here", 0.98, 1.2))["outcome"] == "moved"
    assert compare(rec("holds", 1.14, 1.23), rec("does not hold here", 0.7, 0.9))["outcome"] == "failed"
    steady = lambda v: {"key": "k", "verdict": v, "value": 1.0, "substrate": "ledger"}
    assert compare(steady("holds"), steady("holds in part"))["outcome"] == "failed"
    legacy = lambda v: {"key": "k", "verdict": v, "value": 1.0, "substrate": "measured"}
    assert compare(legacy("holds"), legacy("does not hold here"))["outcome"] == "failed"
