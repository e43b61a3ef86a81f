"""The overlap engine of issue 39: flat buffers, the head call, the emulated link replayed from
the last rank's ready times (P3's sender on the times each step really had), timing from the
last rank's arrival for sync too, real-time priority where permitted."""
import time

import pytest
import torch

from lab import models, schedule
from lab.comm import Collective, CommLedger, Network
from lab.runtime import launch
from lab.schedule import realtime, stamps
from lab.schedule.flat import flatten, is_view
from lab.schedule.plan import head_calls, head_layers, make_units
from lab.train import TrainConfig, train, train_many
from lab.train import loop

NET = "200Mbps,0.5ms"


def _cfg(sched, **kw):
    base = dict(model="vgg", data="digits", steps=5, batch_size=32, lr=0.05, momentum=0.9,
                schedule=sched, model_kw={"channels": 4, "fc": 64})
    base.update(kw)
    return TrainConfig(**base)


# -- pure pieces ---------------------------------------------------------------------------
def test_the_head_is_the_first_layers_that_fit_and_its_messages_go_first():
    assert head_layers([160, 2320, 4640, 262656, 5130], 40_000) == 3
    assert head_layers([50_000, 10], 40_000) == 1          # layer 0 always, however large
    assert head_layers([10, 10], 0) == 0
    units = make_units([10, 10, 100], 50)                  # layers 0, 1 whole; layer 2 in two
    msgs = [[2], [0, 1], [3]]                              # a plan: a slice, the small layers, a slice
    assert head_calls(units, msgs, 2) == [[1], [0, 2]]
    assert head_calls(units, msgs, 0) == [[0, 1, 2]]


def test_flat_buffers_are_views_the_model_and_optimizer_still_see():
    d = __import__("lab.data", fromlist=["load"]).load("digits")
    m = models.make("vgg", d, channels=4, fc=64)
    x, y = d.batch(0, 16, 0, 1)
    before = m(x).detach()
    layers = [(mod, list(mod.parameters(recurse=False))) for mod in m.modules()
              if any(True for _ in mod.parameters(recurse=False))]
    grads, spans = flatten(layers)
    assert torch.equal(m(x).detach(), before)              # same values, new storage
    assert spans[0][0] == 0 and spans[-1][1] == grads.numel()
    for (_, ps), (a, b) in zip(layers, spans):
        assert sum(p.numel() for p in ps) == b - a
        assert all(is_view(p.grad, grads) for p in ps)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    torch.nn.functional.cross_entropy(m(x), y).backward()  # accumulates into the buffer
    assert grads.abs().sum() > 0 and all(is_view(p.grad, grads) for p in m.parameters())
    opt.step()
    opt.zero_grad(set_to_none=False)
    assert grads.abs().sum() == 0 and all(is_view(p.grad, grads) for p in m.parameters())


def test_realtime_is_quiet_where_not_permitted():
    assert realtime.promote(-12345) is False               # no such thread: refused, no error
    assert isinstance(realtime.gloo_threads(), list)


# -- the stamps: when the last rank arrived ------------------------------------------------
def _stamps(ctx):
    b = stamps.board(ctx.comm)
    ch = b.channel(3)
    ch.post(0, 1, 100.0 + ctx.rank)
    ctx.comm.barrier()
    got = ch.last(0, 1)
    missing = ch.last(1, 1, wait=0.01)                     # round 1 was never posted
    return got, missing, stamps.board(ctx.comm) is b


def test_the_board_gives_the_latest_stamp_over_ranks():
    for got, missing, same in launch(_stamps, 3, timeout=60):
        assert got == 102.0 and missing is None and same


def _sync_arrival(ctx, delay):
    cfg = _cfg("sync", network=NET, steps=3)
    comm = Collective(ledger=CommLedger(), network=cfg.network)
    e = loop.engine(ctx, cfg, comm)
    s = schedule.make("sync", e)
    out = []
    for step in range(3):
        comm.ledger.step = step
        x, y = e.data.batch(step, cfg.batch_size, ctx.rank, ctx.world_size, cfg.seed)
        if ctx.rank == 1:
            time.sleep(delay)                              # rank 1 arrives late
        t0 = time.perf_counter()
        res = s.step(step, x, y)
        modeled = sum(r.modeled for r in comm.ledger.records if r.step == step)
        out.append((t0 + res.compute_s, time.perf_counter(), modeled))   # arrival, end, link
    return out


def test_sync_on_an_emulated_link_ends_no_earlier_than_the_last_arrival_plus_the_link():
    r0, r1 = launch(_sync_arrival, 2, 0.05, timeout=60)
    for (_, end0, link), (arrived1, _, _) in zip(r0[1:], r1[1:]):
        assert end0 >= arrived1 + link - 1e-3, (end0 - arrived1, link)


# -- the engine ----------------------------------------------------------------------------
def test_p3_replays_each_step_from_the_last_ranks_ready_times_and_layer_0_overtakes():
    kw = {"slice_size": 1500, "head": 500, "timeline": True}
    slow, net = {1: 2.0}, "20Mbps,1ms"   # rank 1 is slower; FC slices queue past backward's end
    p3, fifo = train_many([_cfg("p3", network=net, schedule_kw=kw, slow_ranks=slow),
                           _cfg("fifo", network=net, schedule_kw={"head": 500, "timeline": True},
                                slow_ranks=slow)], 2, progress=False)
    for h, overtakes in ((p3, True), (fifo, False)):
        replays = []   # each replay: the last rank's end of backward, then its messages
        for e in (e for ev in h.series["events"] for e in ev):
            if e[0] == "last":
                replays.append((e[1], []))
            elif e[0] == "comm" and replays:
                replays[-1][1].append(e)
        assert len(replays) >= h.steps - 1
        for last, comm in replays[1:]:
            first0 = min(e[3] for e in comm if e[1] == 0)
            assert first0 >= last - 1e-9        # layer 0 leaves once every rank has it
            fc = max(e[3] for e in comm if e[1] in (3, 4))   # the FC layers' last piece
            assert (first0 < fc) == overtakes   # P3: layer 0 overtakes it; FIFO: goes after
    assert p3.loss == fifo.loss                            # 2 ranks: bitwise the same model


def test_the_ledger_books_every_emulated_message_with_its_own_latency():
    net = Network.parse(NET)
    h = train(_cfg("p3", network=NET, schedule_kw={"slice_size": 1500, "head": 500,
                                                   "timeline": True}), 2, progress=False)
    # the messages the link carried (send events), priced by the cost model, are the ledger's
    sent = [e[1] for ev in h.series["events"] for e in ev if e[0] == "send"]
    assert sum(h.modeled_comm_s) == pytest.approx(
        sum(net.time("allreduce", 4 * v, 2) for v in sent), rel=1e-9)
    assert h.series["calls"][-1] == 2


def test_every_option_of_the_engine_trains_the_sync_model():
    opts = [{}, {"flat": False}, {"realtime": False}, {"arrival": "own"}, {"in_flight": 1},
            {"calls": "step"}, {"calls": "message"}, {"head": 0}]
    cfgs = [_cfg("sync", network=NET)] + [_cfg("p3", network=NET,
                                               schedule_kw={"slice_size": 1500, **o}) for o in opts]
    hs = train_many(cfgs, 2, progress=False)
    assert all(h.loss == hs[0].loss for h in hs[1:])


# -- the benchmark's arithmetic ------------------------------------------------------------
def test_the_prediction_starts_from_syncs_own_compute_and_ratios_pair_rounds():
    import numpy as np
    from lab.bench.p3 import MODELS, config, head_lags, paired, scaled
    fwd, ready = scaled(([0.001, 0.002, 0.001], [0.003, 0.002, 0.0005]), 0.014)
    assert fwd.sum() + ready.max() == pytest.approx(0.014)          # sync's compute, measured
    assert fwd[1] / fwd[0] == pytest.approx(2.0)                     # the profile's shape kept
    # round by round: a slow round slows both schedules, the ratio stays
    med, q1, q3 = paired({"turns_ms": [10, 20, 40]}, {"turns_ms": [5, 10, 20]})
    assert (med, q1, q3) == (2.0, 2.0, 2.0)
    assert config("vgg32", "p3", None, 3).model_kw == MODELS["vgg32"][1]
    lags = head_lags([[("last", 1.0), ("applied", 0, 1.002, 0.0)], [("last", 2.0)],
                      [("applied", 0, 2.004, 0.0)]], warmup=0)
    assert np.allclose(lags, [0.002, 0.004])
