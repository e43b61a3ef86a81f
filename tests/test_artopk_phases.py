"""The twelve-phase bench of Part 8.2 (lab.bench.artopk_phases): its configurations and the
arithmetic of steps to a target, modeled time and regret, on made-up runs."""
import math

import pytest

from lab.adaptive import AUTHORS_PHASES
from lab.bench import artopk_phases as AP


def test_configs_are_the_authors_phases_with_an_emulated_device():
    cfgs = AP.configs(20, 3, 0.02)
    assert [c.name for c in cfgs] == list(AP.POLICIES)
    for c in cfgs:
        assert c.steps == 240 and c.device_s == 0.02 and c.seed == 3
        links = [c.network_at(s) for s in range(0, 240, 20)]
        assert len(links) == len(AUTHORS_PHASES) and links[5] == links[6] and links[0] == links[11]
        assert links[0].bandwidth > links[5].bandwidth and links[0].latency < links[5].latency
    ad = cfgs[0].aggregator_kw
    assert cfgs[0].aggregator == "adaptive_topk" and ad == {"warmup_steps": 12, "trigger": "link"}
    assert all(c.aggregator_kw["warmup_steps"] == 12 for c in cfgs[1:6])   # the same warm-up


def _run(policy, acc, comm, seed=0, link="model", decide=0.0):
    n = len(acc)
    return {"policy": policy, "seed": seed, "link": link, "eval_step": list(range(1, n + 1)),
            "test_acc": acc, "modeled_comm_s": [comm] * n, "step_s": [0.05 + comm] * n,
            "compute_s": [0.02] * n, "bytes": [0] * n, "decide_s": [decide] + [0.0] * (n - 1),
            "share_s": [0.0] * n, "probe_s": [0.0] * n, "density": [0.1] * n,
            "collective": ["ring"] * n}


def test_steps_time_and_regret_on_made_up_runs():
    acc_fast, acc_slow = [0.5, 0.8, 0.91, 0.95], [0.5, 0.6, 0.7, 0.92]
    runs = [_run("adaptive", acc_fast, 0.01, decide=0.3)]
    runs += [_run(p, acc_slow, 0.0) for p in AP.POLICIES[1:6]]
    runs += [_run("dense", acc_fast, 0.1), _run("dense", [0.1] * 4, 0.1, seed=1)]
    s = AP.summary(runs, 0.9, 0.02)
    r = s["rows"]
    assert r["adaptive"]["steps"] == [3] and r["d=0.1"]["steps"] == [4]
    assert r["adaptive"]["modeled_s"] == [pytest.approx(3 * 0.03)]
    assert r["d=0.1"]["modeled_s"] == [pytest.approx(4 * 0.02)]
    # the controller's seconds are taken out of the measured time, not of the modeled one
    assert r["adaptive"]["free_s"][0] == pytest.approx(r["adaptive"]["measured_s"][0] - 0.3)
    assert r["dense"]["steps"] == [3, math.inf]            # a seed that never gets there
    assert not math.isfinite(r["dense"]["modeled_s_mean"])
    assert s["best"] == "d=0.1"                             # first of the equally quick fixed ones
    assert s["regret"]["best fixed"] == pytest.approx(0.09 / 0.08 - 1)
    assert s["regret"]["dense"] == 0.0 - 1                  # against a policy that never arrives
    assert AP.steps_to(runs[0], 0.99) is None
