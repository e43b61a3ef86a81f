"""``python -m lab advise`` states each method's step-time error band (issue 52): the worst error
lab.sim made on held-out runs of the method's family, the number ``lab.sim.band`` gives; a method
outside the validated families says it was not validated instead of borrowing a band."""
import json

import pytest

from lab.advise.profile import StepProfile
from lab.advise.validated import band_of
from lab.sim.band import band
from lab.sim.step import family

N = 38_410
TRAFFIC = {"fp32": {"allreduce": [1, 4 * N]}, "qsgd": {"allgather": [1, N]},
           "signum": {"allgather": [1, N // 8]}}


@pytest.fixture
def ranked(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LAB_ADVISE_CACHE", str(tmp_path))
    profs = {m: StepProfile(m, "mlp", 4, 0.005, 0.001, t, N) for m, t in TRAFFIC.items()}
    monkeypatch.setattr("lab.advise.measure", lambda *a, **k: profs)
    from lab.cli.advise import main
    args = ["--workers", "4", "--network", "1Gbps,1ms", "--methods", *TRAFFIC, "--no-probe"]
    assert main([*args, "--json"]) == 0
    rows = {r["method"]: r for r in json.loads(capsys.readouterr().out)}
    assert main(args) == 0
    table = {ln.split()[1]: ln for ln in capsys.readouterr().out.splitlines()[3:]}
    return rows, table


def test_each_validated_method_carries_its_familys_band(ranked):
    rows, table = ranked
    for m in ("fp32", "qsgd"):
        worst, where = band(family(m))
        assert 0 < worst < 10                                   # a stored validation was read
        assert rows[m]["band"] == worst and where in rows[m]["band_source"]
        assert f"+/-{100 * worst:.0f}%" in table[m].split()     # beside the step time
        assert where in table[m]
    assert band_of("fp32")[0] != band_of("qsgd")[0]             # a family's own, not one for all


def test_a_method_outside_the_validated_families_says_so(ranked):
    rows, table = ranked
    with pytest.raises(KeyError):
        family("signum")
    assert rows["signum"]["band"] is None and rows["signum"]["band_source"] == "not validated"
    assert "none" in table["signum"].split() and "[not validated]" in table["signum"]
