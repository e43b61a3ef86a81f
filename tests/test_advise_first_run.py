"""What a new user meets in ``python -m lab advise`` (issue 49, item 3): every schedule priced at
the bytes its ledger books per step (P3 and FIFO send sync's bytes, as Part 7's ledger check
shows), progress on stderr while the first run profiles, and codec times labelled with the
machine they were measured on."""
import json

import pytest

from lab.advise import METHODS, measure
from lab.advise.estimate import comm_seconds
from lab.advise.methods import base_config
from lab.advise.profile import StepProfile, summarise
from lab.bench.table import machine
from lab.comm.network import Network
from lab.run.history import History
from lab.train import train_many


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_ADVISE_CACHE", str(tmp_path))
    return tmp_path


def _history(schedule: str, calls: list[int], nbytes: int) -> History:
    h = History({"schedule": schedule}, 2)
    for c in calls:
        h.loss.append(1.0)
        h.compute_s.append(0.01), h.codec_s.append(0.0), h.comm_s.append(0.001)
        h.record({"traffic": {"allreduce": [c, c * nbytes]} if c else {}})
    return h


def test_an_overlapping_schedule_is_priced_at_one_exchange_a_step():
    """The ledger of a run P3 profiled: its thread's calls land a step late, one step books two
    exchanges, and the second half holds 9 in 8 steps (1.125 calls, 9/8 of fp32's bytes)."""
    d = 153_640
    p3 = [0, 1, 1, 1, 1, 1, 1, 1, 2, 0, 1, 1, 2, 0, 1, 2]        # 16 exchanges in 16 steps
    assert sum(p3[8:]) == 9
    prof = summarise(_history("p3", p3, d), "p3", "mlp", d // 4)
    assert prof.traffic == {"allreduce": [1.0, d]} and prof.bytes == d
    fifo = summarise(_history("fifo", [0] + [1] * 14 + [2], d), "fp32", "mlp", d // 4)
    assert fifo.traffic == {"allreduce": [1.0, d]}
    # a synchronous schedule books each step's calls in it: the second half, after a warm-up
    warm = summarise(_history("sync", [3] * 8 + [1] * 8, d), "dgc", "mlp", d // 4)
    assert warm.traffic == {"allreduce": [1.0, d]}


def test_p3_fifo_and_sync_are_priced_at_equal_bytes_for_fp32():
    """Real runs: every schedule sends fp32's dense gradient once a step (the ledger, exact),
    and the advisor prices each at those bytes and calls."""
    base = base_config("mlp").with_(steps=16, eval_every=0)
    fp32 = METHODS["fp32"].config(base)
    cfgs = {"sync": fp32, "fifo": fp32.with_(schedule="fifo", label="fifo"),
            "p3": METHODS["p3"].config(base)}
    hists = dict(zip(cfgs, train_many(list(cfgs.values()), 2, progress=False)))
    dense = 4 * 38_410
    # no latency: the price is the bytes'. How many messages an overlapping schedule's
    # emulated link books a step follows the step's real ready times (coalesced while the link
    # is busy), so under load fifo may book its gradient as two messages of the same bytes.
    link = Network.parse("10Gbps,0ms")
    priced = {}
    for name, h in hists.items():
        assert sum(h.bytes) == 16 * dense, name                     # what the ledger books
        prof = summarise(h, "p3" if name == "p3" else "fp32", "mlp", 38_410)
        calls, nbytes = prof.traffic["allreduce"]
        assert set(prof.traffic) == {"allreduce"} and nbytes == dense, (name, prof.traffic)
        assert calls >= 1, (name, prof.traffic)
        priced[name] = comm_seconds(prof, 16, link)
    assert priced["p3"] == priced["fifo"] == priced["sync"]


def test_the_first_run_says_what_it_measures_on_stderr(cache, capfd):
    chosen = [METHODS["fp32"], METHODS["p3"]]
    got = measure(chosen, "mlp", 2, steps=4, progress=True)
    out, err = capfd.readouterr()
    assert out == ""                                                 # stdout keeps the answer
    lines = [ln for ln in err.splitlines() if ln.startswith("lab advise:")]
    assert "profiling 2 of 2 methods on 2 local ranks" in lines[0]
    assert "about a minute" in lines[0] and str(cache) in lines[0]   # how long, cached where
    assert any("profiled 1/2 fp32" in ln for ln in lines)
    assert any("profiled 2/2 p3" in ln for ln in lines)
    assert got["p3"].traffic["allreduce"][1] == got["fp32"].traffic["allreduce"][1]
    assert measure(chosen, "mlp", 2, steps=4, progress=True) == got  # cached: said nothing
    assert "lab advise" not in capfd.readouterr().err
    assert measure(chosen, "mlp", 2, steps=4) == got


def test_the_table_names_the_machine_codec_times_were_measured_on(cache, capsys, monkeypatch):
    from lab.cli.advise import main
    n = 38_410
    profs = {m: StepProfile(m, "mlp", 4, 0.005, 0.001, {"allreduce": [f, 4 * n * f]}, n)
             for m, f in (("fp32", 1), ("local-sgd", 0.125))}
    monkeypatch.setattr("lab.advise.measure", lambda *a, **k: profs)
    args = ["--params", "1e6", "--compute-ms", "120", "--workers", "4", "--methods", "fp32",
            "local-sgd"]
    assert main(args) == 0
    link, source, columns = capsys.readouterr().out.splitlines()[:3]
    assert link.startswith("4 workers on 1 Gb/s") and "ms/step = compute + codec" in link
    assert f"codec ms this machine's ({machine()})" in source and "1,000,000 values" in source
    assert "compute 120 ms" in source and "codec ms" in columns
    assert main([*args, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["machine"] for r in rows} == {machine()}
