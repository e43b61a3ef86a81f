"""lab.adaptive: the switch against hand-written alpha-beta formulas, the Pareto front, the
compression gain, and the online controller (same choice on every rank; bad args refused)."""
import itertools
import math

import numpy as np
import pytest
import torch

from lab.adaptive import (DensityController, choose, compression_gains, exchange_costs,
                          pareto_front, weighted_choice)
from lab.aggregate import make
from lab.comm import Collective
from lab.runtime import launch


def _by_hand(k, p, a, b):
    lg = math.ceil(math.log2(p))
    bcast = lg * (a + 4 * k * b)
    return {"ring": bcast + 2 * (p - 1) * a + 2 * (p - 1) / p * 4 * k * b,
            "tree": bcast + lg * (a + 4 * k * b),
            "allgather": (p - 1) * (a + 8 * k * b)}


def test_switch_picks_lowest_modeled_cost_on_a_grid():
    n, picked = 1_000_000, set()
    for a, bw, d, p in itertools.product([1e-6, 1e-4, 1e-3, 32e-3], [1e8, 1.25e8, 3.125e9, 1e11],
                                         [0.001, 0.01, 0.1], [2, 4, 16, 64, 1024]):
        k = round(d * n)
        want = _by_hand(k, p, a, 1 / bw)
        got = exchange_costs(k, p, a, 1 / bw)
        for c in want:
            assert got[c] == pytest.approx(want[c], rel=1e-12)
        best = choose(got)
        assert want[best] == min(want.values())
        picked.add(best)
    assert picked == {"ring", "tree", "allgather"}  # the grid exercises every branch


def test_var_adds_one_norm_allgather():
    s, v = exchange_costs(100, 8, 1e-3, 1e-9), exchange_costs(100, 8, 1e-3, 1e-9, "var")
    assert v["allgather"] == s["allgather"]
    assert v["ring"] - s["ring"] == pytest.approx(7 * (1e-3 + 4e-9))


def test_pareto_front_and_weighted_choice():
    t = [1.0, 2.0, 3.0, 2.5]
    inv_gain = [3.0, 2.0, 1.0, 2.5]  # the last is dominated by the second
    assert pareto_front(t, inv_gain) == [True, True, True, False]
    # normalised by the max: scores .6*t/3 + .4*g/3 -> [.333, .4667, .7333, ...]
    assert weighted_choice(t, inv_gain, (0.6, 0.4)) == 0
    assert weighted_choice(t, inv_gain, (0.0, 1.0)) == 2


def test_compression_gain_is_norm_ratio():
    x = torch.tensor([3.0, -4.0, 0.0, 1.0])
    g = compression_gains(x, [1, 2, 4])
    assert g == pytest.approx([4 / math.sqrt(26), 5 / math.sqrt(26), 1.0])
    assert compression_gains(torch.zeros(5), [1, 2]) == [1.0, 1.0]


def test_controller_trades_time_for_gain():
    ctl = DensityController([0.001, 0.01, 0.1], smoothing=0.0)
    ctl.observe([0.3, 0.6, 0.9])
    # a fast link: every density costs about one latency, so the best gain wins
    assert ctl.decide(10_000, 4, 1e-3, 1 / 3.125e9) == 0.1
    # a slow link and a big model: time dominates, a low density wins
    assert ctl.decide(25_000_000, 4, 1e-4, 1 / 1.25e8) < 0.1
    assert not ctl.needs_decision(None)
    ctl.observe([0.1, 0.1, 0.1])  # the gain at the chosen density falls: re-decide
    assert ctl.needs_decision(None)


@pytest.mark.parametrize("bad, word", [([], "candidates"), ([0.0, 0.1], "density"),
                                       ([0.5, 2.0], "density")])
def test_controller_bad_candidates(bad, word):
    with pytest.raises(ValueError, match=word):
        DensityController(bad)
    with pytest.raises(ValueError, match=word):
        make("adaptive_topk", Collective(), candidates=bad)


def test_bad_candidates_refused_before_launch():
    from lab.train import TrainConfig
    cfg = TrainConfig(aggregator="adaptive_topk", aggregator_kw=dict(candidates=[]))
    with pytest.raises(ValueError, match="candidates"):
        cfg.check_workers(2)


def _adaptive(ctx):
    from lab.comm import NetworkSchedule
    sched = NetworkSchedule.parse("25Gbps,1ms:3 1Gbps,32ms:3")
    comm = Collective()
    agg = make("adaptive_topk", comm, candidates=[0.01, 0.1, 0.5], probe_every=2)
    out = []
    for step in range(6):
        comm.network = sched.at(step)
        g = torch.Generator().manual_seed(10 * step + ctx.rank)
        agg.aggregate([torch.randn(4000, generator=g) ** 3 * (1 + ctx.rank)], step)
        out.append(agg.info())
    return out


def test_controller_choice_identical_on_every_rank():
    runs = launch(_adaptive, 3)
    assert len(runs[0]) == 6
    for step in range(6):
        assert len({(r[step]["density"], r[step]["collective"], r[step]["leader"])
                    for r in runs}) == 1
        assert runs[0][step]["gain"] == pytest.approx(runs[1][step]["gain"], abs=0)
