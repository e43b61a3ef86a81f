"""Parameter-server sync modes (issue 12): BSP equals the allreduce loop; SSP never breaks its
bound and s = 0 is BSP; ASP applies every gradient once; staleness drop applies nothing above
its threshold; every byte is in the ledger; a dying worker ends the run; bad input is refused
before launch."""
import pytest

from lab import data as data_mod, models
from lab.runtime import LaunchError, launch
from lab.train import TrainConfig, train, train_many
from lab.sync.server import HEADER

CFG = TrainConfig(model="mlp", data="digits", steps=8, batch_size=24, lr=0.2, eval_every=2)
D = sum(p.numel() for p in models.make("mlp", data_mod.load("digits")).parameters())


def test_bsp_through_the_server_equals_the_allreduce_loop_and_ssp0_is_bsp():
    ref = train(CFG, 2)                                   # 2 peers, allreduce
    bsp, ssp0 = train_many([CFG.with_(sync="bsp"),
                            CFG.with_(sync="ssp", sync_kw={"staleness": 0}, jitter=0.01)], 3)
    for h in (bsp, ssp0):                                 # server + 2 workers, same global batch
        assert h.loss == pytest.approx(ref.loss, rel=1e-5)
        assert h.test_loss == pytest.approx(ref.test_loss, rel=1e-5)
    assert set(bsp.series["staleness"]) == {0}
    # ledger: the server sends parameters n times per step plus n initial ones, and receives
    # n gradients per step, each a float32 message of header + model
    msg = 4 * (HEADER + D)
    assert sum(bsp.bytes) == (CFG.steps + 1) * 2 * msg
    assert sum(bsp.recv_bytes) == CFG.steps * 2 * msg
    assert bsp.rank_bytes[1:] == [CFG.steps * msg] * 2


def test_every_server_mode_runs_on_an_emulated_link():
    # the workers' sync schedule must not wait for a board the server never joins (a hang)
    cfgs = [CFG.with_(sync=m, steps=3, eval_every=0, network="1Gbps,0.5ms")
            for m in ("bsp", "ssp", "asp", "drop")]
    for h in train_many(cfgs, 3, timeout=60):
        assert len(h.loss) >= 3


def _min_clock_ok(workers, n, s):
    """From the arrival order alone: when worker w pushes its c-th gradient it had been let
    start at clock c - 1, so no other worker may be below c - 1 - s now (clocks only grow)."""
    clock = dict.fromkeys(range(1, n + 1), 0)
    for w in workers:
        clock[w] += 1
        if min(clock.values()) < clock[w] - 1 - s:
            return False
    return True


def test_ssp_bound_is_never_exceeded_under_random_delays():
    stal = [0, 1, 2, 3]
    cfgs = [CFG.with_(sync="ssp", sync_kw={"staleness": stal[i % 4]}, seed=i, steps=6,
                      eval_every=0, jitter=0.004, slow_ranks={1 + i % 3: 1.0 + i % 3})
            for i in range(20)]
    hs = train_many(cfgs, 4)
    for c, h in zip(cfgs, hs):
        s = c.sync_kw["staleness"]
        assert max(h.series["gap"]) <= s
        assert _min_clock_ok(h.series["worker"], 3, s)
        assert sum(h.series["grads_by_worker"]) == 6 * 3 == h.series["updates"]
    # the bound binds: with s = 0 every worker computes exactly its share
    assert all(h.series["grads_by_worker"] == [6, 6, 6] for c, h in zip(cfgs, hs)
               if c.sync_kw["staleness"] == 0)


def test_asp_applies_every_gradient_once_and_drop_never_applies_stale_ones():
    # the MLP's gradient takes well under a millisecond: a slowdown of a few times would be lost
    # in the noise of a loaded machine, so the slow worker is 30 times slower
    asp, drop = train_many([CFG.with_(sync="asp", slow_ranks={1: 30.0}),
                            CFG.with_(sync="drop", sync_kw={"max_staleness": 1},
                                      slow_ranks={1: 30.0})], 4)
    total = CFG.steps * 3
    assert sum(asp.series["grads_by_worker"]) == total == asp.series["updates"]
    assert asp.series["applied"] == [1] * total and asp.series["dropped"] == 0
    # the slow worker contributes fewer gradients, and its gradients are stale
    g = asp.series["grads_by_worker"]
    assert g[0] < min(g[1:])
    assert max(asp.series["staleness"]) >= 2
    st, ap = drop.series["staleness"], drop.series["applied"]
    assert all(a == (t <= 1) for t, a in zip(st, ap))
    assert drop.series["dropped"] == ap.count(0) > 0
    assert drop.series["updates"] == total - drop.series["dropped"]


def _dies_on_rank_2(ctx, cfg):
    from lab.train.loop import train_rank
    from lab.train import straggler
    if ctx.rank == 2:
        calls = []

        def pause(self, compute_s):
            calls.append(1)
            if len(calls) == 3:
                raise RuntimeError("worker 2 lost its GPU")
            return 0.0
        straggler.Straggler.pause = pause
        straggler.Straggler.active = True
    return train_rank(ctx, cfg)


@pytest.mark.parametrize("mode", ["bsp", "ssp"])
def test_a_dying_worker_ends_server_and_workers_with_its_traceback(mode):
    with pytest.raises(LaunchError) as err:
        launch(_dies_on_rank_2, 3, CFG.with_(sync=mode, steps=50), timeout=60, progress=False)
    assert err.value.rank == 2 and "lost its GPU" in str(err.value)


@pytest.mark.parametrize("kw, workers, match", [
    (dict(sync="ssp", sync_kw={"staleness": -1}), 4, "staleness"),
    (dict(sync="ssp", sync_kw={"staleness": 1.5}), 4, "staleness"),
    (dict(sync="drop", sync_kw={"max_staleness": -2}), 4, "max_staleness"),
    (dict(sync="asp", sync_kw={"stalenes": 2}), 4, "sync_kw"),
    (dict(sync="bsp", slow_ranks={4: 2.0}), 4, "slow_ranks"),
    (dict(sync="bsp", slow_ranks={0: 2.0}), 4, "slow_ranks"),
    (dict(sync="bsp"), 1, "workers"),
    (dict(sync="asp", batch_size=2), 4, "batch_size"),
    (dict(sync="ssp", compressor="fp16"), 4, "compressor"),
])
def test_bad_arguments_are_refused_before_launch(kw, workers, match):
    with pytest.raises(ValueError, match=match):
        train(CFG.with_(**kw), workers)


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="sync"):
        TrainConfig(sync="gossip")
