"""The claims registry's decision rules (lab.rules) and the registry itself (book/claims.toml):
the intervals cover as they say, each rule gives every verdict it can, every claim of the book is
registered, and no entry's rule changed in git history without a history line."""
import pathlib
import random
import subprocess
import sys
import tomllib

import pytest

from lab import rules
from lab.claims import VERDICTS

ROOT = pathlib.Path(__file__).resolve().parent.parent
REGISTRY = ROOT / "book" / "claims.toml"


def test_the_median_interval_covers_the_median_at_least_95_percent_of_the_time():
    rng = random.Random(48)
    for n in (9, 25):
        trials = 4000
        hits = 0
        for _ in range(trials):       # a skewed distribution whose median is 1
            xs = [rng.lognormvariate(0, 0.5) for _ in range(n)]
            _, low, high = rules.median_interval(xs)
            hits += low <= 1.0 <= high
        # binomial coverage: >= 96.1% at n = 9, >= 95.7% at n = 25; 4000 trials: se ~ 0.3%
        assert hits / trials >= 0.945, (n, hits / trials)
    assert rules.median_interval(range(1, 10))[1:] == (2, 8)   # x_(2), x_(8) at n = 9
    with pytest.raises(ValueError, match="at least 6 rounds"):
        rules.median_interval([1.0] * 5)


def test_the_ratio_rule_gives_every_verdict_and_names_a_loss():
    assert rules.ratio([1.30] * 9, 1.25).verdict == VERDICTS[0]
    assert rules.ratio([1.10] * 9, 1.25).verdict == VERDICTS[1]
    loss = rules.ratio([0.90] * 9, 1.25)
    assert loss.verdict == VERDICTS[2] and loss.note.startswith("a loss")
    mixed = rules.ratio([0.9, 1.1] * 4 + [1.0], 1.25)
    assert mixed.verdict == VERDICTS[2] and mixed.note.startswith("inconclusive")
    with pytest.raises(ValueError, match="at least 25 rounds"):
        rules.ratio([1.2] * 9, 1.05)               # a small effect needs more rounds
    with pytest.raises(ValueError, match="T"):
        rules.ratio([1.2] * 9, 0.9)
    with pytest.raises(ValueError, match="finite"):
        rules.ratio([float("nan")] * 9, 1.25)


def test_the_parity_rule_reads_the_interval_then_the_mean():
    assert rules.parity([0.001, 0.002, 0.003], 0.01).verdict == VERDICTS[0]
    assert rules.parity([-0.01, 0.005, 0.02], 0.01).verdict == VERDICTS[1]   # mean in, end out
    assert rules.parity([0.03, 0.04, 0.05], 0.01).verdict == VERDICTS[2]
    with pytest.raises(ValueError, match="at least 3 seeds"):
        rules.parity([0.0, 0.0], 0.01)


def test_the_bound_rule_uses_both_ends_of_the_interval():
    assert rules.bound(0.90, 0.01, "<=", 1.0).verdict == VERDICTS[0]
    assert rules.bound(0.99, 0.01, "<=", 1.0).verdict == VERDICTS[1]
    assert rules.bound(1.10, 0.01, "<=", 1.0).verdict == VERDICTS[2]
    assert rules.bound(0.40, 0.0, ">=", 0.3).verdict == VERDICTS[0]
    assert rules.weakest([VERDICTS[0], VERDICTS[2], VERDICTS[1]]) == VERDICTS[2]


def test_every_claim_the_book_tests_is_registered_with_a_valid_rule():
    sys.path.insert(0, str(ROOT / "tools"))
    import claims_page as cp
    reg = rules.registry(REGISTRY)
    stored = {c.record["key"]: c for c in cp.scan()}
    assert not set(stored) - set(reg), f"claims without a registry entry: {set(stored) - set(reg)}"
    for key, c in stored.items():
        assert reg[key]["notebook"] == c.docname + ".ipynb", key


def test_a_malformed_entry_is_refused_by_name(tmp_path):
    bad = tmp_path / "claims.toml"
    bad.write_text('[claims.x]\nstatement = "s"\nsource = "p"\nquantity = "q"\nevidence = "ledger"\n'
                   'kind = "ratio"\nhistory = [{date = "d", change = "c", why = "w"}]\n')
    with pytest.raises(ValueError, match=r"x \(ratio\) lacks \['T', 'T_source'\]"):
        rules.registry(bad)


def _versions() -> list[tuple[str, dict]]:
    """(commit, claims) for every committed version of the registry, oldest first."""
    try:
        log = subprocess.run(["git", "log", "--format=%H", "--reverse", "--", "book/claims.toml"],
                             cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"no git history here: {e}")
    out = []
    for h in log:
        text = subprocess.run(["git", "show", f"{h}:book/claims.toml"], cwd=ROOT,
                              capture_output=True, text=True).stdout
        if text:
            out.append((h[:9], tomllib.loads(text).get("claims", {})))
    return out


def _check_history(versions) -> list[str]:
    """The entries whose rule changed between two versions without a new history line."""
    bad = []
    for (_, old), (h, new) in zip(versions, versions[1:]):
        for key, e in new.items():
            if key in old and rules.rule_of(old[key]) != rules.rule_of(e) \
                    and len(e.get("history", [])) <= len(old[key].get("history", [])):
                bad.append(f"{key} at {h}")
    return bad


def test_no_rule_changed_in_git_history_without_a_history_line():
    versions = _versions()
    # the working tree's registry counts as the newest version
    versions.append(("working tree", tomllib.loads(REGISTRY.read_text()).get("claims", {})))
    assert _check_history(versions) == []


def test_the_history_check_catches_a_silent_change():
    h = [{"date": "d", "change": "c", "why": "w"}]
    old = {"k": {"kind": "ratio", "T": 1.25, "history": h}}
    silent = {"k": {"kind": "ratio", "T": 1.15, "history": h}}
    said = {"k": {"kind": "ratio", "T": 1.15, "history": h + h}}
    assert _check_history([("a", old), ("b", silent)]) == ["k at b"]
    assert _check_history([("a", old), ("b", said)]) == []


def test_the_evidence_is_read_from_the_runs_and_says_when_they_are_mixed():
    from lab.claims import evidence
    from lab.train import History
    loop_ = History({"network": None}, 2)
    emul = History({"network": "1Gbps", "link": "model"}, 2)
    kern = History({"network": "1Gbps", "link": "kernel"}, 2)
    kern.wire_sent = [10]
    assert evidence([emul, emul]) == {"link": "modeled", "clock": "wall", "bytes": None, "runs": 2}
    assert evidence([kern], bytes="on the wire")["bytes"] == "on the wire"
    assert evidence([loop_, kern], clock="modeled")["link"] == "mixed: kernel, none"
    with pytest.raises(ValueError, match="no wire bytes"):
        emul.evidence(bytes="on the wire")
