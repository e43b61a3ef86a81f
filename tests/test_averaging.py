"""Local SGD, post-local SGD, one-shot averaging and EASGD, run in real processes."""
import pytest
import torch

from lab import schedule
from lab.averaging.easgd import EASGD
from lab.averaging.params import flat, load
from lab.comm import Collective, CommLedger
from lab.runtime import launch
from lab.train import TrainConfig, train_many
from lab.train.loop import engine

BASE = TrainConfig(steps=16, batch_size=16, lr=0.1, eval_every=0, seed=3)


@pytest.fixture(scope="module")
def runs():
    cfgs = [BASE, BASE.with_(averaging="local", averaging_kw={"period": 1}),
            BASE.with_(averaging="local", averaging_kw={"period": 4}),
            BASE.with_(averaging="local", averaging_kw={"period": 4, "warmup": 4}),
            BASE.with_(averaging="oneshot")]
    return train_many(cfgs, 2, progress=False)


def test_local_sgd_with_period_one_is_synchronous_sgd(runs):
    sync, local1 = runs[0], runs[1]
    assert torch.allclose(torch.tensor(sync.loss), torch.tensor(local1.loss), atol=1e-5)
    assert sync.test_loss[-1] == pytest.approx(local1.test_loss[-1], abs=1e-5)
    assert sum(local1.bytes) == sum(sync.bytes)  # a parameter vector is a gradient's size


def test_bytes_per_step_fall_to_one_over_h(runs):
    sync, local4, post, oneshot = runs[0], runs[2], runs[3], runs[4]
    assert sum(local4.bytes) * 4 == sum(sync.bytes)
    assert local4.series["averaged"] == [0.0, 0.0, 0.0, 1.0] * 4
    # post-local: 4 dense steps, then 12 local steps averaged every 4
    assert sum(post.bytes) == sync.bytes[0] * (4 + 3)
    # one average for the whole run, after the last step (in the rank totals, not a step's)
    assert sum(oneshot.bytes) == 0 and oneshot.rank_bytes == [sync.bytes[0]] * 2


def _replicas(ctx, period):
    cfg = BASE.with_(averaging="local", averaging_kw={"period": period})
    e = engine(ctx, cfg, Collective(ledger=CommLedger()))
    sched, out = schedule.make("sync", e), []
    for step in range(2 * period):
        x, y = e.data.batch(step, cfg.batch_size, ctx.rank, ctx.world_size, cfg.seed)
        sched.step(step, x, y)
        before = flat(e.params)
        e.averaging.after_step(step)
        out.append((before, flat(e.params)))
    return out


def test_averaged_model_is_the_mean_of_the_replicas_after_each_period():
    period = 3
    ranks = launch(_replicas, 2, period, progress=False)
    for step in range(2 * period):
        befores = torch.stack([r[step][0] for r in ranks])
        afters = [r[step][1] for r in ranks]
        if (step + 1) % period == 0:
            for a in afters:
                assert torch.allclose(a, befores.mean(0), atol=1e-7)
                assert torch.equal(a, afters[0])  # every replica is the same model
        else:
            assert all(torch.equal(a, b) for a, b in zip(afters, befores))
            assert not torch.equal(afters[0], afters[1])  # replicas drift apart between averages


def _easgd_two_workers(ctx):
    cfg = BASE.with_(averaging="easgd", averaging_kw={"period": 1, "rho": 2.0}, lr=0.1)
    e = engine(ctx, cfg, Collective(ledger=CommLedger()))
    n = sum(p.numel() for p in e.params)
    load(e.params, torch.full((n,), 1.0 if ctx.rank == 0 else 3.0))
    e.averaging.center = torch.zeros(n)
    e.averaging.after_step(0)
    worker, center = flat(e.params), e.averaging.center.clone()
    e.averaging.finish()
    return worker, center, flat(e.params)


def test_easgd_update_matches_the_paper_on_a_hand_computed_example():
    # alpha = lr * rho = 0.2; x0 = 1, x1 = 3, center 0:
    # x0 <- 1 - 0.2 (1 - 0) = 0.8; x1 <- 3 - 0.2 * 3 = 2.4; center <- 0 + 0.2 (1 + 3) = 0.8
    (w0, c0, f0), (w1, c1, f1) = launch(_easgd_two_workers, 2, progress=False)
    assert torch.allclose(w0, torch.full_like(w0, 0.8))
    assert torch.allclose(w1, torch.full_like(w1, 2.4))
    for c in (c0, c1, f0, f1):  # the center is the same everywhere; finish() loads it
        assert torch.allclose(c, torch.full_like(c, 0.8))


@pytest.mark.parametrize("averaging, kw, workers, match", [
    ("local", {"period": 0}, 2, "period"),
    ("local", {"warmup": -1}, 2, "warmup"),
    ("local", {"perio": 3}, 2, "unknown"),
    ("easgd", {"rho": 20.0}, 4, "rho"),
    ("easgd", {"rho": 1.0, "beta": 0.5}, 2, "not both"),
    ("easgd", {"beta": 1.5}, 2, "beta"),
])
def test_bad_averaging_arguments_are_refused_before_launch(averaging, kw, workers, match):
    with pytest.raises(ValueError, match=match):  # a misspelt argument already at construction
        BASE.with_(averaging=averaging, averaging_kw=kw).check_workers(workers)


def test_easgd_moving_rate():
    assert EASGD.moving_rate(0.1, 4, rho=2.0) == pytest.approx(0.2)
    assert EASGD.moving_rate(0.1, 4) == pytest.approx(0.9 / 4)  # the paper's beta = 0.9
