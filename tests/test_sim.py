"""lab.sim (issue 52): bytes are the ledger's, collectives are lab.comm.cost's formulas, the step
falls as bandwidth rises, an overlapped step lies in [max(C, T), C + T], bad input is named."""
import math

import pytest
import torch

from lab.comm import cost
from lab.compress import make, wire_bytes
from lab.sim import Cluster, Config, predict
from lab.sim import collectives
from lab.sim.codec import payload_bytes, traffic

SHAPES = ((64, 32), (64,), (10, 64), (10,))
N = sum(math.prod(s) for s in SHAPES)


@pytest.mark.parametrize("name,kw", [("bf16", {}), ("qsgd", {"s": 15}), ("topk", {"density": 0.01})])
def test_payload_bytes_are_the_ledgers(name, kw):
    g = torch.randn(N, generator=torch.Generator().manual_seed(0))
    payload, _ = make(name, **kw).compress(g)
    assert payload_bytes(name, N, tuple(sorted(kw.items()))) == wire_bytes(payload)


def test_fp32_traffic_is_four_bytes_per_value():
    assert traffic("fp32", SHAPES) == [("allreduce", 1.0, 4.0 * N)]


def test_ring_allreduce_is_cost_formula():
    c = Cluster(8, 125e6, 1e-4)
    n = 4.0 * N
    assert collectives.allreduce(n, c) == pytest.approx(cost.allreduce_ring(n, 8, 1e-4, 1 / 125e6))
    # the formula itself: 2 (p-1) alpha + 2 (p-1)/p n beta (Thakur et al. 2005)
    assert collectives.allreduce(n, c) == pytest.approx(2 * 7 * 1e-4 + 2 * 7 / 8 * n / 125e6)


@pytest.mark.parametrize("tech", ["fp32", "bf16", "topk+ef", "powersgd", "p3", "async-ps"])
def test_step_falls_as_bandwidth_rises(tech):
    steps = [predict(Config(SHAPES, tech, Cluster(4, bw, 1e-5), 0.01)).step_s
             for bw in (1e6, 1e7, 1e8, 1e9)]
    assert all(a >= b for a, b in zip(steps, steps[1:])), steps
    assert steps[0] > steps[-1]


@pytest.mark.parametrize("tech", ["fifo", "p3"])
@pytest.mark.parametrize("bw", [1e6, 1e8])
def test_overlapped_step_between_max_and_sum(tech, bw):
    c = Cluster(4, bw, 1e-5)
    comp = 0.02
    t = predict(Config(SHAPES, "fp32", c, 0.0)).comm_s
    step = predict(Config(SHAPES, tech, c, comp)).step_s
    assert max(comp, t) * (1 - 1e-9) <= step <= (comp + t) * (1 + 1e-6)


@pytest.mark.parametrize("kw,arg", [(dict(nodes=0), "nodes"), (dict(bandwidth=-1.0), "bandwidth"),
                                    (dict(alpha=float("nan")), "alpha")])
def test_bad_cluster_names_argument(kw, arg):
    base = dict(nodes=2, bandwidth=1e8)
    with pytest.raises(ValueError, match=arg):
        Cluster(**{**base, **kw})


def test_bad_config_names_argument():
    c = Cluster(2, 1e8)
    with pytest.raises(ValueError, match="technique"):
        Config(SHAPES, "nope", c, 0.01)
    with pytest.raises(ValueError, match="compute_s"):
        Config(SHAPES, "fp32", c, float("inf"))
    with pytest.raises(ValueError, match="shapes"):
        Config((), "fp32", c, 0.01)


def test_exchange_time_is_paid_once_per_exchange():
    c = Cluster(4, 1e9, 1e-5)
    base = predict(Config(SHAPES, "fp32", c, 0.01)).step_s
    assert predict(Config(SHAPES, "fp32", c, 0.01, exchange_s=0.002)).step_s == pytest.approx(base + 0.002)
    local = predict(Config(SHAPES, "local-sgd", c, 0.01)).step_s
    got = predict(Config(SHAPES, "local-sgd", c, 0.01, exchange_s=0.002)).step_s
    assert got == pytest.approx(local + 0.002 / 8)   # one exchange every period of 8 steps

