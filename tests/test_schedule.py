"""Schedules (issue 7): sync, fifo, p3 and the ablations change *when* bytes move, never values."""
import random
import time
from collections import defaultdict

import pytest
import torch

from lab import schedule
from lab.comm import Collective, CommLedger
from lab.runtime import LaunchError, launch
from lab.schedule import overlap
from lab.schedule.plan import Unit, issue_order, make_units, predict_step
from lab.train import TrainConfig, train
from lab.train import loop

OVERLAPPING = ["fifo", "p3", "slicing-only", "priority-only"]


# -- plan: pure functions ------------------------------------------------------------------
def test_slices_cover_every_value_exactly_once():
    sizes = [0, 1, 39_999, 40_000, 40_001, 123_457]
    for slice_size in (None, 1, 7, 40_000):
        units = make_units(sizes, slice_size)
        for layer, n in enumerate(sizes):
            seen = torch.zeros(n, dtype=torch.int64)
            for u in units:
                if u.layer == layer:
                    seen[u.start:u.stop] += 1
                    assert slice_size is None or u.numel <= slice_size
            assert torch.all(seen == 1)


def test_priority_order_is_forward_order_and_fifo_is_backward_order():
    units = make_units([5, 3, 8], 2)
    ready = [3.0, 2.0, 1.0]            # backward: the last layer is ready first
    late = [0.0] * len(units)          # everything sent instantly: no overtaking possible
    fifo = [units[i].layer for i in issue_order(units, ready, late, priority=False)]
    assert fifo == sorted(fifo, reverse=True)
    all_ready = [0.0, 0.0, 0.0]
    slow = [1.0] * len(units)
    prio = [units[i] for i in issue_order(units, all_ready, slow, priority=True)]
    assert prio == sorted(units)       # forward order, then offset


def test_a_late_high_priority_slice_overtakes_waiting_low_priority_slices():
    # layer 1 (4 slices) is ready at t=0, layer 0 (1 slice) at t=1.5; each slice takes 1 s
    units = [Unit(0, 0, 1)] + [Unit(1, a, a + 1) for a in range(4)]
    ready, xfer = [1.5, 0.0], [1.0] * 5
    p3 = [units[i] for i in issue_order(units, ready, xfer, priority=True)]
    assert p3 == [Unit(1, 0, 1), Unit(1, 1, 2), Unit(0, 0, 1), Unit(1, 2, 3), Unit(1, 3, 4)]
    fifo = [units[i] for i in issue_order(units, ready, xfer, priority=False)]
    assert fifo[-1] == Unit(0, 0, 1)


def test_predicted_step_overlaps_latency_only_with_units_in_flight():
    units = make_units([4], 1)                 # one layer, four units, no compute at all
    step = lambda k, lat: predict_step([0.0], [0.0], units, [0, 1, 2, 3], [1.0] * 4,
                                       in_flight=k, latency=[lat] * 4)
    assert step(1, 0.5) == pytest.approx(4.0)  # one at a time: every unit pays its latency
    assert step(4, 0.5) == pytest.approx(2.5)  # one latency, then the bytes back to back
    assert step(2, 0.9) == pytest.approx(2.1)  # the window, not the link, limits
    assert step(4, 0.9) == pytest.approx(1.3)
    with pytest.raises(ValueError, match="in_flight"):
        step(0, 0.5)


# -- real processes ------------------------------------------------------------------------
def _cfg(sched, **kw):
    base = dict(model="vgg", data="digits", steps=4, batch_size=32, lr=0.05, momentum=0.9,
                schedule=sched, model_kw={"channels": 4, "fc": 64})
    base.update(kw)
    if sched in ("p3", "slicing-only"):
        base.setdefault("schedule_kw", {"slice_size": 1500})
    return TrainConfig(**base)


def _run(ctx, cfgs, delays=False):
    """Each config's final parameters and bytes per step (records grouped by the step they carry)."""
    if delays:  # random per-rank delays inside backward: readiness order differs across ranks
        rng = random.Random(1234 + ctx.rank)
        plain = overlap.Overlap._grad_ready

        def slow_ready(self, layer):
            hook = plain(self, layer)

            def delayed(p):
                time.sleep(rng.uniform(0, 0.004))
                hook(p)
            return delayed
        overlap.Overlap._grad_ready = slow_ready
    out = []
    for cfg in cfgs:
        comm = Collective(ledger=CommLedger(), network=cfg.network_at(0))
        e = loop.engine(ctx, cfg, comm)
        s = schedule.make(cfg.schedule, e, **cfg.schedule_kw)
        try:
            for step in range(cfg.steps):
                comm.ledger.step = step
                x, y = e.data.batch(step, cfg.batch_size, ctx.rank, ctx.world_size, cfg.seed)
                s.step(step, x, y)
        finally:
            s.close()
        per_step = defaultdict(int)
        for r in comm.ledger.records:
            if r.tag != "plan":
                per_step[r.step] += r.bytes
        out.append((torch.cat([p.detach().reshape(-1) for p in e.params]), dict(per_step)))
    return out


def test_every_schedule_gives_the_sync_model_and_sends_the_dense_bytes():
    names = ["sync"] + OVERLAPPING
    many = {"slice_size": 1500, "in_flight": 4}  # several slices on the wire at once
    cfgs = ([_cfg(n) for n in names] + [_cfg("p3", schedule_kw=many), _cfg("fifo", schedule_kw={"in_flight": 3})]
            + [_cfg("sync", compressor="fp16"), _cfg("p3", compressor="fp16"),
               _cfg("p3", compressor="fp16", schedule_kw=many)])
    res = launch(_run, 2, cfgs, timeout=120)
    ref, _ = res[0][0]
    dense = ref.numel() * 4
    for rank in res:
        for name, (params, per_step) in zip(names + ["p3 in flight", "fifo in flight"], rank):
            assert torch.allclose(params, ref, rtol=1e-5, atol=1e-6), name
            assert per_step == {s: dense for s in range(4)}, name
        (half_sync, b_sync), *halves = rank[-3:]
        for half, b in halves:
            assert b_sync == b == {s: dense // 2 for s in range(4)}
            assert torch.allclose(half_sync, half, rtol=1e-3, atol=1e-4)
    assert torch.equal(res[0][2][0], res[1][2][0])   # replicas identical


def test_no_deadlock_and_same_model_under_random_per_rank_delays():
    cfgs = [_cfg("sync", steps=2)] + [_cfg(n, steps=2, seed=0, jitter=0.003)
                                     for n in ["p3", "fifo", "slicing-only", "priority-only"] * 5]
    cfgs += [_cfg("p3", steps=2, schedule_kw={"slice_size": 1500, "in_flight": 4}),
             _cfg("fifo", steps=2, schedule_kw={"in_flight": 3})]
    res = launch(_run, 2, cfgs, True, timeout=150)   # 20 delayed runs, 2 with exchanges in flight
    for rank in res:
        ref = rank[0][0]
        for params, _ in rank[1:]:
            assert torch.allclose(params, ref, rtol=1e-5, atol=1e-6)


def _fail_in_comm_thread(ctx, cfg):
    from lab.aggregate.dense import DenseAllreduce
    plain = DenseAllreduce.reduce

    def reduce(self, tensor, key, step):
        if ctx.rank == 1 and step == 2:
            raise RuntimeError("injected failure in the communication thread")
        return plain(self, tensor, key, step)
    DenseAllreduce.reduce = reduce
    return loop.train_rank(ctx, cfg)


@pytest.mark.parametrize("in_flight", [1, 4])
def test_a_rank_failing_during_overlapped_comm_ends_all_ranks(in_flight):
    with pytest.raises(LaunchError, match="injected failure"):
        launch(_fail_in_comm_thread, 2, _cfg("p3", steps=6, schedule_kw={"in_flight": in_flight}),
               timeout=60)


def test_bad_arguments_are_refused_before_launch():
    with pytest.raises(ValueError, match="schedule"):
        TrainConfig(schedule="p4")
    for kw, match in (({"slice_size": 0}, "slice_size"), ({"slice_size": 2.5}, "slice_size"),
                      ({"slice": 10}, "schedule_kw"), ({"in_flight": 0}, "in_flight"),
                      ({"in_flight": True}, "in_flight"), ({"calls": "many"}, "calls")):
        with pytest.raises(ValueError, match=match):
            train(TrainConfig(schedule="p3", schedule_kw=kw), workers=2)
    with pytest.raises(ValueError, match="schedule_kw"):
        _cfg("fifo", schedule_kw={"slice_size": 10}).check_workers(2)
    with pytest.raises(ValueError, match="needs its own thread|aggregator must be"):
        _cfg("fifo", aggregator="majority_vote").check_workers(2)


def test_train_records_the_overlap_split_and_a_timeline():
    h = train(_cfg("p3", network="1Gbps", schedule_kw={"slice_size": 4000, "timeline": True}),
              workers=2)
    assert len(h.series["overlapped_comm_s"]) == h.steps
    assert any(ev[0] == "comm" for ev in h.series["events"][0] + h.series["events"][1])
    assert all(c >= 0 for c in h.comm_s)


def test_an_emulated_link_takes_a_head_call_and_one_more_a_real_one_follows_the_plan():
    # same messages on the link, same model; only how the real bytes travel differs. The plan's
    # grouping reads the layers' ready times, so they are given (forward order, 0.5 s apart:
    # backward readies the last layer first), not measured: the decision under test is then a
    # function of its inputs, not of the machine's load at the time of the profile.
    spread = (2.5, 2.0, 1.5, 1.0, 0.5, 0.0)           # the VGG-like model's six layers
    kw = {"slice_size": 1500, "head": 500, "ready_at": spread}   # the conv layers are the head
    at_once = {**kw, "calls": "plan", "ready_at": (0.0,) * 6}
    runs = {"auto, link": _cfg("p3", network="1Gbps", schedule_kw=kw),
            "step, link": _cfg("p3", network="1Gbps", schedule_kw={**kw, "calls": "step"}),
            "plan, link": _cfg("p3", network="1Gbps", schedule_kw={**kw, "calls": "plan"}),
            "plan, link, ready at once": _cfg("p3", network="1Gbps", schedule_kw=at_once),
            "auto, loopback": _cfg("p3", schedule_kw=kw),
            "step, loopback": _cfg("p3", schedule_kw={**kw, "calls": "step"})}
    hs = dict(zip(runs, loop.train_many(list(runs.values()), 2, progress=False)))
    calls = {k: h.series["calls"][-1] for k, h in hs.items()}
    msgs = {k: h.series["messages"][-1] for k, h in hs.items()}
    assert calls["auto, link"] == 2 and calls["step, link"] == calls["step, loopback"] == 1
    # layers half a second apart: no call may wait for the next layer, so each layer's
    # messages travel in calls of their own; ready at once, they may share calls
    assert calls["plan, link"] >= 6 and calls["auto, loopback"] >= 6
    assert calls["plan, link, ready at once"] < calls["plan, link"]
    assert all(msgs[k] > 1 for k in msgs)              # the link still sees every message
    assert len({h.loss[-1] for h in hs.values()}) == 1                   # 2 ranks: bitwise


def test_a_given_profile_must_name_every_layer():
    with pytest.raises(LaunchError, match="ready_at must give one time per layer"):
        loop.train_many([_cfg("p3", schedule_kw={"slice_size": 1500, "ready_at": (1.0, 0.0)})],
                        2, progress=False)


def test_layer_times_reads_forward_and_ready_offsets_from_a_timeline():
    from lab.bench.p3 import layer_times
    from lab.train import History
    h = History({}, 1)
    # two steps of a 3-layer timeline: (kind, layer, ..., time); the first step is a warm-up
    for t0, scale in ((0.0, 9.0), (10.0, 1.0)):
        h.record({"events": [("fwd", 0, t0), ("fwd", 1, t0 + 1 * scale), ("fwd", 2, t0 + 3 * scale),
                             ("backward", -1, t0 + 6 * scale), ("ready", 2, t0 + 7 * scale),
                             ("ready", 1, t0 + 9 * scale), ("ready", 0, t0 + 12 * scale)]})
    fwd, ready = layer_times(h)
    assert fwd.tolist() == [1.0, 2.0, 3.0] and ready.tolist() == [6.0, 3.0, 1.0]


def test_turns_compares_each_schedule_with_its_reference_and_weak_scaling_sets_the_batch():
    from lab.bench.p3 import config, turns
    cfgs = [config("mlp", s, None, 4, batch_size=64) for s in ("sync", "slicing-only", "p3")]
    got = turns(cfgs, 2, rounds=2, block=2, ref=[0, 1, 1])
    # two ranks: every sum is a + b, so every schedule ends on the same parameters bitwise
    assert [g["param_diff"] for g in got] == [0.0, 0.0, 0.0]
    assert [g["ref_diff"] for g in got] == [0.0, 0.0, 0.0]
    assert all(len(g["step_s"]) == 4 and g["ms"] > 0 for g in got)
    assert config("vgg", "p3", None, 4, batch_size=512).batch_size == 512


def test_schedule_table_hands_out_each_rounds_turn_for_ratios_round_by_round():
    import numpy as np

    from lab.bench.p3 import schedule_table
    got = {}
    rows = schedule_table(("mlp",), ("1Gbps,0.1ms",), ("sync", "p3"), workers=(2,), rounds=3,
                          block=2, turns_ms=got)
    assert sorted(got) == [("mlp", 2, "1Gbps,0.1ms", "p3"), ("mlp", 2, "1Gbps,0.1ms", "sync")]
    assert all(len(v) == 3 and min(v) > 0 for v in got.values())
    ratios = np.asarray(got["mlp", 2, "1Gbps,0.1ms", "sync"]) / np.asarray(got["mlp", 2, "1Gbps,0.1ms", "p3"])
    p3 = next(r for r in rows if r["schedule"] == "p3")
    assert p3["speedup"] == round(float(np.median(ratios)), 3)   # the row's median of the same rounds


# -- the lean engine: virtual link clock, messages, real calls ----------------------------
def test_link_clock_books_the_cost_model_and_never_delivers_before_the_bytes():
    from lab.comm.network import LinkClock
    cost = lambda n: 0.5 + n / 100.0          # noqa: E731  alpha 0.5 s, 100 B/s
    one = LinkClock(in_flight=1)
    one.issue = 1.0
    assert one.book(cost, 100, arrived=0.0) == pytest.approx(1.5)     # modeled 1.5 s, alone
    assert one.spans == [(1.0, 2.5)]
    one.pieces = [(0.5, 2.0), (0.5, 2.0)]                              # two messages, one real call
    assert one.book(cost, 200, arrived=9.0) == pytest.approx(3.0)
    assert [e for _, e in one.spans] == [9.0, 9.0]                     # delivered when the bytes are
    assert one.free == pytest.approx(5.5)                              # 2.5 + 1.5 + 1.5: the link's own time
    many = LinkClock(in_flight=4)
    many.pieces = [(0.25, 0.0)] * 4                                    # four 1 s messages in flight
    many.book(cost, 400, arrived=0.0)
    assert [e for _, e in many.spans] == pytest.approx([1.5, 2.5, 3.5, 4.5])  # one latency, bytes queue
    with pytest.raises(ValueError, match="in_flight"):
        LinkClock(0)


def test_messages_join_small_ready_units_and_calls_never_wait_for_a_later_layer():
    from lab.schedule.plan import batches, coalesce
    units = make_units([10, 10, 100], 50)             # layer 2: two slices of 50
    ready = [0.95, 0.95, 0.0]                         # layers 0, 1 overtake layer 2's second slice
    xfer = [1.0] * len(units)
    order = issue_order(units, ready, xfer, priority=True)
    msgs = coalesce(units, order, ready, xfer, 50)
    assert sorted(i for m in msgs for i in m) == list(range(len(units)))
    assert [[units[i].layer for i in m] for m in msgs] == [[2], [0, 1], [2]]  # the two small layers join
    assert coalesce(units, order, ready, xfer, 0) == [[i] for i in order]
    with pytest.raises(ValueError, match="coalesce"):
        coalesce(units, order, ready, xfer, -1)
    calls = batches(units, msgs, ready, xfer, [0.1] * len(units))
    assert calls == [[0], [1, 2]]                     # the first slice does not wait for layers 0, 1
    assert batches(units, msgs, ready, xfer, [2.0] * len(units)) == [[0], [1], [2]]  # too slow to join


def test_predict_is_the_one_prediction_and_sync_is_compute_plus_one_allreduce():
    from lab.comm import Network
    from lab.schedule.plan import predict
    net = Network.parse("1Gbps,0.1ms")
    sizes, fwd, ready = [1000, 200_000, 5000], [0.001, 0.002, 0.001], [0.004, 0.002, 0.0005]
    sync = predict(sizes, fwd, ready, "sync", net, 2)
    assert sync == pytest.approx(sum(fwd) + max(ready) + net.time("allreduce", 4 * sum(sizes), 2))
    for s in OVERLAPPING:
        t = predict(sizes, fwd, ready, s, net, 2)
        assert max(sum(fwd) + max(ready), net.time("allreduce", 4 * sum(sizes), 2)) <= t * (1 + 1e-9)
        assert t < sync


def test_predicted_overlap_lies_between_its_bounds_for_any_profile():
    """The bench flags a speedup above (C + T) / max(C, T) as a broken baseline (issue 50): the
    prediction must itself respect it, and never be slower than computing and then sending
    every message one after another (no overlap at all)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from lab.comm import Network
    from lab.schedule.plan import P3_SLICE_SIZE, predict

    layer = st.tuples(st.integers(1, 300_000), st.floats(1e-5, 5e-3), st.floats(1e-5, 5e-3))

    @settings(max_examples=60, deadline=None)
    @given(st.lists(layer, min_size=1, max_size=8), st.sampled_from(["100Mbps,0.1ms", "1Gbps,0.1ms", "10Gbps,1ms"]),
           st.sampled_from([2, 4, 8]))
    def check(layers, spec, p):
        sizes = [n for n, _, _ in layers]
        fwd = [f for _, f, _ in layers]
        # ready offsets: backward runs last layer first, so readiness grows toward layer 0
        back = [b for _, _, b in layers]
        ready = [sum(back[i:]) for i in range(len(back))]
        net = Network.parse(spec)
        C, T = sum(fwd) + max(ready), net.time("allreduce", 4 * sum(sizes), p)
        for s in OVERLAPPING:
            t = predict(sizes, fwd, ready, s, net, p)
            pieces = [min(P3_SLICE_SIZE, n - k) for n in sizes for k in range(0, n, P3_SLICE_SIZE)]
            serial = C + sum(net.time("allreduce", 4 * v, p) for v in pieces)   # every slice alone, no overlap
            assert max(C, T - net.time("allreduce", 0, p)) <= t * (1 + 1e-9), (s, t, C, T)
            assert t <= serial * (1 + 1e-9), (s, t, serial)

    check()
