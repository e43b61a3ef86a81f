"""The loop's named extension points: network schedules, stragglers, new config fields, the CLI
wiring of schedule/averaging/sync/attack, pluggable commands and benchmarks."""
import subprocess
import sys
import time

import numpy as np
import pytest

from lab.comm import Network, NetworkSchedule
from lab.train import History, TrainConfig, train
from lab.train.straggler import Straggler

CFG = TrainConfig(model="mlp", data="digits", steps=6, batch_size=32, lr=0.1, eval_every=0)


def test_network_schedule_switches_links_by_step_and_keeps_the_last():
    s = NetworkSchedule.parse("25Gbps,1ms:3 1Gbps,32ms:2")
    fast, slow = Network.parse("25Gbps,1ms"), Network.parse("1Gbps,32ms")
    assert [s.at(i) for i in range(7)] == [fast] * 3 + [slow] * 4
    assert NetworkSchedule.parse([("1gbps", 2), (Network(1e-3, 1e6), 1)]).at(2).bandwidth == 1e6
    for bad, match in [("1Gbps", "LINK:STEPS"), ("1Gbps:0", "positive"), ("fast:3", "not understood"),
                       ("", "at least one"), (5, "string or a list")]:
        with pytest.raises(ValueError, match=match):
            NetworkSchedule.parse(bad)


def test_training_follows_the_network_schedule_in_the_ledger():
    h = train(CFG.with_(network_schedule="10Gbps,0.1ms:3 100Mbps,1ms:3"), 2)
    slow, fast = h.modeled_comm_s[3:], h.modeled_comm_s[:3]
    assert min(slow) > 10 * max(fast) > 0
    assert h.config["network_schedule"] == "10Gbps,0.1ms:3 100Mbps,1ms:3"


def test_straggler_sleeps_its_slowdown_and_draws_reproducible_jitter():
    s = Straggler(factor=3.0)
    t0 = time.perf_counter()
    slept = s.pause(0.02)
    assert 0.04 <= slept <= time.perf_counter() - t0 + 1e-6
    assert Straggler().pause(1.0) == 0.0 and not Straggler().active
    a, b = Straggler(jitter=0.002, seed=1, rank=2), Straggler(jitter=0.002, seed=1, rank=2)
    assert [a.rng.random() for _ in range(3)] == [b.rng.random() for _ in range(3)]
    with pytest.raises(ValueError, match="factor"):
        Straggler(factor=0.5)


def test_an_emulated_device_lasts_its_seconds_whatever_it_measured():
    dev = Straggler(device_s=0.03)
    assert dev.active
    t0 = time.perf_counter()
    slept = dev.pause(0.01)
    assert 0.02 <= slept <= time.perf_counter() - t0 + 1e-6
    assert Straggler(device_s=0.01).pause(0.05) == 0.0        # never shortens a pass
    assert 0.035 <= Straggler(factor=2.0, device_s=0.02).pause(0.0)   # a slow device: factor x
    for bad in (0.0, -1.0, 61.0, float("nan")):
        with pytest.raises(ValueError, match="device_s"):
            Straggler(device_s=bad)
    with pytest.raises(ValueError, match="device_s"):
        CFG.with_(device_s=0.0)


def _pauses_of_rank_1(ctx, cfg):
    """Train ``cfg``, recording on rank 1 what the straggler was asked to sleep and slept."""
    from lab.train import straggler
    from lab.train.loop import train_rank
    calls, pause = [], straggler.Straggler.pause

    def recorded(self, compute_s):
        slept = pause(self, compute_s)
        calls.append((self.factor, compute_s, slept))
        return slept
    straggler.Straggler.pause = recorded
    h = train_rank(ctx, cfg)
    return h.loss, calls if ctx.rank == 1 else None


def test_a_slow_rank_sleeps_its_slowdown_every_step_and_computes_the_same():
    # no wall-clock race (a loaded machine can make any two step times cross): the slow rank's
    # straggler is asked once per step with the measured compute, and sleeps at least
    # (factor - 1) x it; the fast rank never sleeps; the math is the same, only later
    from lab.runtime import launch
    fast = train(CFG, 2)
    (loss0, none), (loss1, calls) = launch(_pauses_of_rank_1, 2, CFG.with_(slow_ranks={1: 30.0}),
                                           progress=False)
    assert np.add(loss0, loss1) / 2 == pytest.approx(fast.loss, rel=1e-6) and none is None
    assert len(calls) == CFG.steps
    for factor, compute, slept in calls:
        assert factor == 30.0 and compute > 0 and slept >= 29.0 * compute


@pytest.mark.parametrize("kw, match", [
    ({"schedule": "p4"}, "unknown schedule"),
    ({"averaging": "locall"}, "unknown averaging"),
    ({"sync": "bps"}, "unknown sync mode"),
    ({"attack": "nope"}, "unknown attack"),
    ({"slow_ranks": {1: 0.5}}, r"slow_ranks\[1\]"),
    ({"slow_ranks": {-1: 2.0}}, "slow_ranks keys"),
    ({"jitter": -1.0}, "jitter"),
    ({"byzantine": -1}, "byzantine"),
    ({"byzantine": 1}, "need an attack"),
    ({"network": "1gbps", "network_schedule": "1gbps:3"}, "not both"),
    ({"schedule_kw": [1]}, "schedule_kw must be a dict"),
])
def test_bad_extension_point_configs_name_the_argument(kw, match):
    with pytest.raises((ValueError, TypeError), match=match):
        TrainConfig(**kw)


def test_world_dependent_settings_are_refused_before_launch():
    with pytest.raises(ValueError, match="slow_ranks names rank 3"):
        CFG.with_(slow_ranks={3: 2.0}).check_workers(2)


def test_history_series_round_trip(tmp_path):
    h = History({"label": "x"}, 1)
    h.record({"collective": "ring", "density": 0.01})
    h.record({"collective": "tree", "density": 0.02})
    h.to_json(tmp_path / "h.json")
    assert History.from_json(tmp_path / "h.json").series == {"collective": ["ring", "tree"],
                                                             "density": [0.01, 0.02]}


def test_cli_takes_the_extension_point_flags(tmp_path):
    r = subprocess.run([sys.executable, "-m", "lab", "train", "--workers", "2", "--steps", "4",
                        "--slow-ranks", "1=2.0", "--network-schedule", "1Gbps:2 100Mbps:2",
                        "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    bad = subprocess.run([sys.executable, "-m", "lab", "train", "--workers", "2", "--slow-ranks",
                          "2=3.0"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "slow_ranks names rank 2" in bad.stderr
    listing = subprocess.run([sys.executable, "-m", "lab", "list"], capture_output=True, text=True,
                             timeout=60).stdout
    for line in ("schedules:", "averaging:", "sync modes:", "attacks:"):
        assert line in listing
