"""A model given by its parameter count is priced from codec speed measured per value on this
machine, one process at a time (issue 41, item 5): never by scaling a profile of ``workers``
ranks that share the cores (651 times for the help's example, which priced fp32, without a
codec, at 1.7 s a step)."""
import json
import math
from dataclasses import replace

import pytest

from lab.advise import METHODS, advise
from lab.advise import profile as profile_mod
from lab.advise.codec_speed import Replay, has_codec, layer_shapes, per_value, sample_values
from lab.advise.estimate import comm_seconds
from lab.advise.profile import StepProfile
from lab.comm.network import Network


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_ADVISE_CACHE", str(tmp_path))
    return tmp_path


def _profiles(codec_s: float, world: int = 16) -> dict:
    """What 16 ranks on two cores measure for the MLP: a codec time that is mostly waiting."""
    n = 38_410
    traffic = {"fp32": {"allreduce": [1, 4 * n]}, "fp16": {"allreduce": [1, 2 * n]},
               "topk+ef": {"allgather": [1, 8 * n // 100]},
               "local-sgd": {"allreduce": [0.125, 4 * n]}}
    return {m: StepProfile(m, "mlp", world, 0.005, codec_s, t, n, comm_s=0.1)
            for m, t in traffic.items()}


def test_codec_time_is_measured_per_value_and_never_scaled_from_the_profile(cache, monkeypatch):
    params, link = 400_000, Network.parse("1Gbps,1ms")
    names = ["fp32", "fp16", "topk+ef", "local-sgd"]
    got = {}
    for contended in (0.0004, 2.0):   # the profile's own codec time must not matter
        monkeypatch.setattr("lab.advise.measure", lambda *a, c=contended, **k: _profiles(c))
        got[contended] = {r.method: r for r in advise("mlp", 16, link, names, params=params,
                                                      compute_ms=120)}
    a, b = got.values()
    speed, _, values = per_value([METHODS[m] for m in names], "mlp", 16, params)   # cached
    assert values == pytest.approx(params, rel=0.01)      # this machine holds 400k values
    for m in names:
        assert a[m].codec_s == b[m].codec_s == pytest.approx(speed[m] * params), m
    fp32 = a["fp32"]
    assert fp32.codec_s == 0.0 and a["local-sgd"].codec_s == 0.0       # no codec, no codec time
    priced = comm_seconds(replace(_profiles(0)["fp32"], traffic={"allreduce": [1, 4 * params]}),
                          16, link)
    assert fp32.step_s == pytest.approx(0.12 + priced)   # compute + the link's price, no floor
    assert a["topk+ef"].codec_s > 0 and has_codec(METHODS["topk+ef"])


def test_the_help_example_is_priced_sanely(cache, capsys):
    """``python -m lab advise --params 25e6 --compute-ms 120 --workers 16``: measured for real
    (16 ranks for the traffic, codecs one process at a time)."""
    from lab.cli.advise import main
    names = ["fp32", "fp16", "topk+ef", "local-sgd"]
    assert main(["--params", "25e6", "--compute-ms", "120", "--workers", "16", "--methods",
                 *names, "--json"]) == 0
    rows = {r["method"]: r for r in json.loads(capsys.readouterr().out)}
    fp32, fp16 = rows["fp32"], rows["fp16"]
    link = Network.parse("1gbps")
    ring = comm_seconds(StepProfile("fp32", "mlp", 16, 0, 0, {"allreduce": [1, 1e8]}, 1), 16, link)
    assert fp32["codec_s"] == 0.0 and fp32["step_s"] == pytest.approx(0.12 + ring)   # 1.64 s
    assert fp16["comm_s"] == pytest.approx(ring / 2, rel=0.01)      # half the bytes
    assert fp16["step_s"] < fp32["step_s"]                          # a cast costs less than that
    for r in rows.values():   # at most 100 ns a value: a codec on one core, not 16 ranks waiting
        assert 0 <= r["codec_s"] < 100e-9 * 25e6, r
    assert rows["local-sgd"]["codec_s"] == 0 and min(rows.values(), key=lambda r: r["time_s"]
                                                     )["method"] != "fp32"


def test_allgather_decoding_grows_with_the_ranks_in_one_process(cache):
    """Replay runs rank 0 of a world alone: an allgather hands it every rank's payload, so a
    Top-k rank decodes 16 payloads at 16 ranks, 2 at 2."""
    r = Replay(4)
    x = [t.tolist() for t in r.allgather(__import__("torch").arange(3.0))]
    assert r.world_size == 4 and x == [[0.0, 1.0, 2.0]] * 4
    topk = [METHODS["topk+ef"]]
    small = per_value(topk, "mlp", 2, 300_000)[0]["topk+ef"]
    large = per_value(topk, "mlp", 16, 300_000)[0]["topk+ef"]
    assert large > small > 0


def test_the_gradient_is_laid_out_as_the_models_layers_scaled_up():
    from lab.advise.methods import base_config
    shapes = layer_shapes([(512, 64), (512,), (10, 512), (10,)], 38_410 * 100)
    assert shapes[0] == (5120, 640) and shapes[1] == (51200,) and len(shapes[2]) == 2
    assert sum(math.prod(s) for s in shapes) == pytest.approx(38_410 * 100, rel=0.01)
    assert sample_values(1000, 16) == 1000                # a small model: its own size
    assert sample_values(25_000_000, 16) <= 1 << 21        # a big one: what this machine holds
    assert sample_values(25_000_000, 1024) < sample_values(25_000_000, 16)   # many payloads
    cfg = METHODS["fp32"].config(base_config("mlp"))
    # a run-control field does not change what a run computes, nor which profile it reuses
    assert profile_mod._digest(cfg) == profile_mod._digest(cfg.with_(stop_on_divergence=False))


def test_stored_curves_hold_for_a_field_added_since_at_its_default():
    """A TrainConfig field added after the curves were measured (stop_on_divergence, a link),
    left at its default, is the same training; a field missing at another value is not."""
    from lab.advise.estimate import convergence, penalty
    conv = convergence("mlp")

    def without(*keys):
        st = {k: v for k, v in conv["settings"]["topk+ef"].items() if k not in keys}
        return {**conv, "settings": {**conv["settings"], "topk+ef": st}}
    assert penalty(without("stop_on_divergence", "weight_decay"), "topk+ef", 4)[1] is not None
    assert "other settings" in penalty(without("lr"), "topk+ef", 4)[2]   # 0.2, not 0.1
