"""The method advisor prices a measured step exactly as the emulated link does.

The property that makes its predictions honest: the ledger's per-step traffic of a run without
a link, priced by ``lab.advise.estimate.comm_seconds``, equals the modeled communication time
the same run records on an emulated link (both use the link's alpha-beta model; the traffic is
the same payloads). Penalties come from measured curves; bad input is named.
"""
import json
import math
from dataclasses import replace

import pytest

from lab.advise import METHODS, advise
from lab.advise.estimate import comm_seconds, penalty, predict, steps_to
from lab.advise.profile import StepProfile, summarise
from lab.comm.network import Network
from lab.train import TrainConfig, train_many


@pytest.mark.parametrize("names", [("fp32", "topk+ef", "powersgd", "local-sgd", "async-ps")])
def test_priced_traffic_equals_the_emulated_links_modeled_time(names):
    link = Network.parse("200Mbps,2ms")
    base = TrainConfig(model="mlp", data="digits", steps=16, batch_size=32, eval_every=0)
    cfgs = [METHODS[n].config(base) for n in names]
    plain = train_many(cfgs, 2, progress=False)
    linked = train_many([c.with_(network=link) for c in cfgs], 2, progress=False)
    for n, h, hl in zip(names, plain, linked):
        prof = summarise(h, n, "mlp", 1)
        modeled = sum(hl.modeled_comm_s[8:]) / 8
        assert prof.bytes > 0
        assert math.isclose(comm_seconds(prof, 2, link), modeled, rel_tol=1e-9), n


def test_steps_and_penalty_come_from_the_curves():
    curve = [[5, 0.5], [10, 0.85], [15, 0.92]]
    assert steps_to(curve, 0.9) == 15 and steps_to(curve, 0.95) is None
    conv = {"target": 0.9, "curves": {
        "fp32": {"2": [[5, 0.91]], "8": [[10, 0.95]]},
        "topk+ef": {"2": [[5, 0.5], [20, 0.93]], "8": [[40, 0.9]]},
        "dgc": {"2": [[5, 0.3]]}}}
    assert penalty(conv, "topk+ef", 2)[:2] == (4.0, 5)
    assert penalty(conv, "topk+ef", 16)[:2] == (4.0, 10)      # nearest measured world: 8
    assert penalty(conv, "dgc", 2)[0] == math.inf
    assert penalty(conv, "fp16", 2)[0] == 1.0 and "not measured" in penalty(conv, "fp16", 2)[2]
    assert penalty(conv, "topk+ef", 2, target=0.5)[:2] == (1.0, 5)


def test_ranking_orders_by_time_and_scales_a_users_model():
    link = Network.parse("100Mbps,1ms")
    mk = lambda name, b: StepProfile(name, "mlp", 4, 0.01, 0.001, {"allreduce": [1, b]}, 1000)  # noqa: E731
    profs = {"fp32": mk("fp32", 4000), "fp16": mk("fp16", 2000)}
    ranked = predict(profs, 4, link, "mlp", conv={})
    assert [r.method for r in ranked] == ["fp16", "fp32"]
    assert ranked[0].comm_s < ranked[1].comm_s and "compute 10.0 ms" in ranked[1].reason
    from lab.advise import _scaled
    big = _scaled(replace(profs["fp32"], comm_s=0.3), 10_000, 0.5, 0.02)
    assert big.traffic["allreduce"] == [1, 40_000] and big.compute_s == 0.5
    # codec time as measured per value (tests/test_advise_pricing.py), not the profile's
    # scaled; no loopback floor: that is this machine's, not the cluster's
    assert big.codec_s == 0.02 and big.comm_s == 0.0


@pytest.mark.parametrize("kw, msg", [({"workers": 1}, "workers"), ({"network": None}, "network"),
                                     ({"params": 10}, "compute_ms"),
                                     ({"methods": ["zip"]}, "method")])
def test_bad_input_is_named(kw, msg):
    with pytest.raises(ValueError, match=msg):
        advise(**{"model": "mlp", "workers": 2, "network": "1gbps", **kw})


def test_stored_curves_are_used_only_for_the_settings_they_were_measured_with():
    from lab.advise.estimate import convergence
    conv = convergence("mlp")
    assert conv and conv["settings"]["topk+ef"]["compressor"] == "topk"
    assert penalty(conv, "topk+ef", 4)[1] is not None           # measured, same settings
    changed = {**conv, "settings": {**conv["settings"],
                                    "topk+ef": {**conv["settings"]["topk+ef"], "lr": 1.0}}}
    assert "other settings" in penalty(changed, "topk+ef", 4)[2]


def test_a_model_without_curves_borrows_the_measured_models_mean_penalty(tmp_path):
    from lab.advise.estimate import borrowed_penalty
    path = tmp_path / "conv.json"
    path.write_text(json.dumps({"_meta": {}, "mlp": {"target": 0.9, "curves": {
        "fp32": {"4": [[10, 0.95]]}, "dgc": {"4": [[20, 0.95]]}, "zip": {"4": [[5, 0.1]]}}},
        "cnn": {"target": 0.9, "curves": {"fp32": {"4": [[30, 0.95]]}, "dgc": {"4": [[30, 0.95]]},
                                          "zip": {"4": [[5, 0.1]]}}}}))
    pen, ref, why = borrowed_penalty("dgc", 4, path)
    assert (pen, ref) == (1.5, 20.0) and "mean of mlp+cnn" in why     # (2 + 1) / 2, (10 + 30) / 2
    assert borrowed_penalty("dgc", 4, path, exclude="cnn")[:2] == (2.0, 10.0)
    assert borrowed_penalty("zip", 4, path)[0] == math.inf           # failed on every model
    assert borrowed_penalty("dgc", 4, tmp_path / "none.json")[:2] == (1.0, None)
    real = borrowed_penalty("topk+ef", 4)                            # the stored curves
    assert real[1] is not None and 1.0 <= real[0] < 3.0 and "linear" not in real[2]


def test_a_step_never_communicates_faster_than_its_collectives_ran_on_loopback():
    from lab.advise.estimate import step_seconds
    prof = StepProfile("fp32", "mlp", 4, 0.01, 0.0, {"allreduce": [1, 1000]}, 1000, comm_s=0.02)
    fast, slow = Network.parse("25Gbps,0.05ms"), Network.parse("100Mbps,20ms")
    assert step_seconds(prof, 4, fast) == (0.03, 0.02)                 # the loopback floor
    priced = comm_seconds(prof, 4, slow)
    assert priced > 0.02 and step_seconds(prof, 4, slow) == (0.01 + priced, priced)


def test_async_ps_runs_one_server_and_the_other_ranks_as_workers():
    m = METHODS["async-ps"]
    assert m.family == "asynchronous" and m.overrides["sync"] == "asp"
    base = TrainConfig(model="mlp", data="digits", steps=6, batch_size=32, eval_every=3)
    h, = train_many([m.config(base)], 3, progress=False)
    s = h.series
    assert len(s["grads_by_worker"]) == 2 and sum(s["grads_by_worker"]) == 6 * 2
    assert set(s["worker"]) == {1, 2} and s["updates"] == 12 and h.eval_step == [3, 6]
    prof = summarise(h, "async-ps", "mlp", 1)
    d = sum(int(b) for _, b in prof.traffic.values()) / 2 / 2       # per message, in bytes
    assert prof.traffic == {"recv": [2.0, 2 * d], "send": [2.0, 2 * d]}   # 2 pushes in, 2 pulls out
    assert prof.server_s > 0 and prof.compute_s > 0 and prof.codec_s == 0
    assert h.step_s.sum() == pytest.approx(h.wall_s, rel=0.2)       # the server's own clock


def test_the_servers_link_is_the_bottleneck_of_the_parameter_server():
    from lab.advise.estimate import step_seconds
    link = Network.parse("1Gbps,1ms")
    B = 150_000

    def ps(world, compute=0.0):   # per step: w-1 pushes in and w-1 pulls out, through one link
        n = world - 1
        return StepProfile("async-ps", "mlp", world, compute, 0.0,
                           {"recv": [n, n * B], "send": [n, n * B]}, 1000)
    exposed = {w: step_seconds(ps(w), w, link)[1] for w in (2, 4, 8)}
    for w in exposed:
        assert exposed[w] == pytest.approx(comm_seconds(ps(w), w, link), rel=1e-12)
    assert exposed[2] < exposed[4] < exposed[8]
    assert exposed[8] == pytest.approx(7 * exposed[2])               # linear in the workers
    one = 2 * (1e-3 + B / link.bandwidth)                             # a push and a pull
    assert step_seconds(ps(2, 0.5), 2, link)[0] == pytest.approx(0.5 + one)   # one worker waits
    # with compute to hide it, each worker waits only for its own push and pull: 1/7 of the link
    assert step_seconds(ps(8, 0.5), 8, link)[0] == pytest.approx(0.5 + one)
    fast = predict({"async-ps": ps(8, 0.5)}, 8, link, "mlp", conv={})[0]
    assert "through the server" in fast.reason and fast.step_s == pytest.approx(0.5 + one)


# -- the machine's share of a step, pooled over the methods; curves probed for a new model ----
def _plain(name, compute, comm, traffic, world=8):
    return StepProfile(name, "mlp", world, compute, 0.001, traffic, 1000, comm_s=comm)


def test_rounds_are_the_cost_models_latency_terms():
    from lab.advise.machine import rounds
    assert [rounds("allreduce", p) for p in (2, 4, 8)] == [2, 6, 14]   # ring: 2(p-1)
    assert [rounds("allgather", p) for p in (2, 4, 8)] == [1, 3, 7]
    assert rounds("send", 8) == 1


def test_pooled_profiles_share_the_machines_compute_and_cost_per_round():
    from lab.advise.machine import per_round, pooled
    ar, ag = {"allreduce": [1.0, 150_000]}, {"allgather": [1.0, 5_000]}
    profs = {"fp32": _plain("fp32", 0.001, 0.028, ar), "fp16": _plain("fp16", 0.003, 0.035, ar),
             "qsgd": _plain("qsgd", 0.002, 0.035, ag), "signum": _plain("signum", 0.009, 0.049, ag),
             "dgc": _plain("dgc", 0.004, 0.056, {"allgather": [2.0, 8_000]}),
             "powersgd": _plain("powersgd", 0.002, 0.063, {"allreduce": [3.0, 10_000]}),
             "artopk": _plain("artopk", 0.002, 0.5, {"allgather": [1.0, 5_000], "broadcast": [1.0, 8]}),
             "p3": _plain("p3", 0.007, 0.04, ar), "async-ps": _plain("async-ps", 0.005, 0.03, ar)}
    cost = per_round(profs)
    # allreduce: fp32 0.028/14, fp16 0.035/14, powersgd 0.063/42; allgather: 0.035/7, 0.049/7, 0.056/14
    assert cost["allreduce"] == pytest.approx(0.002) and cost["allgather"] == pytest.approx(0.005)
    got = pooled(profs)
    for name in ("fp32", "fp16", "qsgd", "signum", "dgc", "powersgd", "artopk"):
        assert got[name].compute_s == 0.002            # the median of the seven plain methods
        assert got[name].codec_s == 0.001 and got[name].traffic == profs[name].traffic
    assert got["fp16"].comm_s == pytest.approx(14 * 0.002)
    assert got["dgc"].comm_s == pytest.approx(2 * 7 * 0.005)
    # a broadcast has no single-op method: its 3 rounds at the median of the others' costs
    assert got["artopk"].comm_s == pytest.approx(7 * 0.005 + 3 * 0.0035)
    assert got["p3"] == profs["p3"] and got["async-ps"] == profs["async-ps"]   # not pooled
    assert pooled({"fp32": profs["fp32"], "p3": profs["p3"]}) == {"fp32": profs["fp32"],
                                                                  "p3": profs["p3"]}
    mixed = {**profs, "fp16": replace(profs["fp16"], world=4)}
    assert pooled(mixed) == mixed                                        # one world at a time


def test_predict_pools_by_default_and_can_read_each_profile_alone():
    ar = {"allreduce": [1.0, 1000]}
    profs = {"fp32": _plain("fp32", 0.001, 0.05, ar, 4), "fp16": _plain("fp16", 0.003, 0.01, ar, 4)}
    link = Network.parse("25Gbps,0.05ms")
    own = {r.method: r.step_s for r in predict(profs, 4, link, "mlp", conv={}, pool=False)}
    both = {r.method: r.step_s for r in predict(profs, 4, link, "mlp", conv={})}
    assert own == pytest.approx({"fp32": 0.052, "fp16": 0.014})
    assert both["fp32"] == both["fp16"] == pytest.approx(0.002 + 0.001 + 0.03)


def test_a_model_without_stored_curves_is_probed_once_and_cached(tmp_path, monkeypatch):
    from lab.advise import curves, curves_for
    monkeypatch.setenv("LAB_ADVISE_CACHE", str(tmp_path))
    monkeypatch.setattr(curves, "PROBE_STEPS", 10)
    chosen = [METHODS["fp32"], METHODS["signum"]]
    conv = curves_for("linear", chosen)
    assert conv["probed"] and conv["target"] == 0.85 and set(conv["curves"]) == {"fp32", "signum"}
    assert [s for s, _ in conv["curves"]["fp32"]["2"]] == [5, 10]
    assert conv["settings"]["signum"]["aggregator"] == "signum"
    assert penalty(conv, "signum", 8)[2].endswith("(probed at 2 ranks)") or \
        "did not reach" in penalty(conv, "signum", 8)[2]

    def no_launch(*a, **k):
        raise AssertionError("measured again")
    monkeypatch.setattr(curves, "measure_curves", no_launch)
    assert curves_for("linear", chosen) == conv                      # from the cache
    assert curves_for("mlp", chosen) is None                         # stored curves
    assert curves_for("linear", chosen, probe=False) is None         # borrow instead
    assert curves_for("vgg", chosen) is None                         # no target known: borrow
    with pytest.raises(ValueError, match="target"):
        curves.probed("vgg", chosen)
