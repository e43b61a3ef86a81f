"""Robust aggregators: Krum's choice and its n > 2f + 2, median and trimmed mean against their
definitions, centered clipping's bound, NaN filtering and the mean that refuses NaN."""
import numpy as np
import pytest
import scipy.stats
import torch

from lab import aggregate
from lab.aggregate.krum import krum_scores
from lab.comm import Collective
from lab.runtime import LaunchError
from lab.train import TrainConfig, train_many

SOLO = Collective()  # no process group: the rules are tested on stacked vectors directly


def test_krum_picks_the_hand_computed_vector():
    v = torch.tensor([[0.0, 0], [1, 0], [1.5, 0], [3, 0], [100, 0]])
    # n = 5, f = 1: n - f - 2 = 2 neighbours. score(1) = 0.25 + 1 = 1.25 is the lowest;
    # score(2) = 0.25 + 2.25 = 2.5, score(0) = 1 + 2.25 = 3.25, score(3) = 2.25 + 4 = 6.25
    assert krum_scores(v, 1).tolist() == pytest.approx([3.25, 1.25, 2.5, 6.25, 97**2 + 98.5**2])
    krum = aggregate.make("krum", comm=SOLO, f=1)
    assert torch.equal(krum.rule(v, 0), v[1])
    multi = aggregate.make("multikrum", comm=SOLO, f=1, m=2)
    assert torch.equal(multi.rule(v, 0), (v[1] + v[2]) / 2)


@pytest.mark.parametrize("name, workers, f", [("krum", 4, 1), ("multikrum", 6, 2),
                                             ("trimmed_mean", 4, 2)])
def test_too_few_workers_are_refused_before_launch(name, workers, f):
    cfg = TrainConfig(aggregator=name, aggregator_kw={"f": f}, batch_size=12)
    with pytest.raises(ValueError, match="needs workers n > 2f"):
        cfg.check_workers(workers)
    with pytest.raises(ValueError, match="needs workers n > 2f"):
        aggregate.make(name, comm=SOLO, f=f).rule(torch.zeros(workers, 3), 0)


def test_krum_accepts_the_smallest_world():
    TrainConfig(aggregator="krum", aggregator_kw={"f": 1}, batch_size=10).check_workers(5)


@pytest.mark.parametrize("kw, match", [({"f": -1}, "f"), ({"f": 1.5}, "f"), ({"m": 0}, "m")])
def test_bad_krum_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        aggregate.make("multikrum", comm=SOLO, **kw)


def test_median_and_trimmed_mean_equal_numpy_and_scipy():
    rng = np.random.default_rng(0)
    for n in (3, 4, 5, 7, 8):
        x = rng.standard_normal((n, 50)).astype(np.float64)
        t = torch.from_numpy(x)
        med = aggregate.make("median", comm=SOLO).rule(t, 0)
        assert np.allclose(med.numpy(), np.median(x, axis=0))
        for f in range(0, (n - 1) // 2 + 1):
            tm = aggregate.make("trimmed_mean", comm=SOLO, f=f).rule(t, 0)
            assert np.allclose(tm.numpy(), scipy.stats.trim_mean(x, f / n, axis=0))


def test_centered_clipping_bounds_one_outlier_and_is_the_mean_without_clipping():
    v = torch.randn(5, 10)
    wide = aggregate.make("centered_clip", comm=SOLO, tau=1e6)
    assert torch.allclose(wide.rule(v, 0), v.mean(0), atol=1e-6)
    honest = torch.zeros(4, 10)
    evil = torch.full((1, 10), 1e6)
    cc = aggregate.make("centered_clip", comm=SOLO, tau=1.0, iters=3)
    out = cc.rule(torch.cat([honest, evil]), 0)
    assert out.norm() <= 3 * 1.0 / 5 + 1e-6  # each iteration moves at most tau / n
    with pytest.raises(ValueError, match="tau"):
        aggregate.make("centered_clip", comm=SOLO, tau=0)


@pytest.fixture(scope="module")
def nan_runs():
    base = TrainConfig(steps=6, batch_size=10, eval_every=0, byzantine=1, attack="nan")
    cfgs = [base.with_(aggregator=a, aggregator_kw=kw) for a, kw in
            (("krum", {"f": 1}), ("multikrum", {"f": 1}), ("median", {}),
             ("trimmed_mean", {"f": 1}), ("centered_clip", {}))]
    return train_many(cfgs, 5, progress=False)


def test_a_nan_vector_is_filtered_by_every_robust_rule(nan_runs):
    for h in nan_runs:
        assert h.series["nonfinite_dropped"] == [1] * 6, h.name
        assert np.isfinite(h.loss).all() and np.isfinite(h.test_acc[-1]), h.name
        # the allgather is in the ledger: each rank sends one flat gradient (fp32) per step
        assert len(set(h.bytes)) == 1 and h.recv_bytes[0] == 4 * h.bytes[0], h.name


def test_the_mean_refuses_a_nan_gradient():
    cfg = TrainConfig(steps=3, batch_size=6, aggregator="mean", byzantine=1, attack="nan")
    with pytest.raises(LaunchError, match="not finite"):
        train_many([cfg], 3, progress=False)
