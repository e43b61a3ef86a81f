"""lab.sim.ps_sync (the synchronous parameter server, KVStore against P3) and lab.sim.models'
per-layer profiles: hand-computed steps, bounds, and the papers' totals."""
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lab.sim import ps_sync as ps
from lab.sim.models import MODELS, layers


def test_one_layer_by_hand():
    # 1,000,000 values = 4 MB at 4 MB/s: push 1 s, reply 1 s; whole key: they follow each
    # other; 40,000-value slices: the reply of each slice rides beside the next push
    args = ([1_000_000], [0.1], [0.2])
    assert ps.step(*args, "kvstore", 4e6, 2, colocated=False) == pytest.approx(0.2 + 2 + 0.1)
    assert ps.step(*args, "p3", 4e6, 2, colocated=False) == pytest.approx(0.2 + 1 + 0.04 + 0.1)
    # co-located: one NIC carries both, each (N - 1) / N of the message: 2 x 0.5 s at N = 2
    assert ps.step(*args, "kvstore", 4e6, 2, colocated=True) == pytest.approx(0.2 + 1 + 0.1)


def test_priority_sends_the_first_layer_first():
    # layer 1's gradient is ready at once, layer 0's 50 ms later, 1 s of bytes each: in
    # arrival order layer 0 waits behind all of layer 1 and its 1 s forward starts late; by
    # priority its slices overtake and that forward overlaps layer 1's remaining bytes
    sizes, fwd, bwd = [400_000, 400_000], [1.0, 0.01], [0.05, 0.0]
    fifo = ps.step(sizes, fwd, bwd, "sliced", 1.6e6, 2, colocated=False)
    p3 = ps.step(sizes, fwd, bwd, "p3", 1.6e6, 2, colocated=False)
    assert fifo == pytest.approx(2 + 0.1 + 1.01)   # last push at 2 s, its reply 0.1 s
    assert p3 < fifo - 0.8


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 200_000), min_size=1, max_size=8),
       st.floats(1e5, 1e9), st.sampled_from(ps.SCHEMES), st.booleans(), st.integers(2, 8))
def test_step_between_its_bounds(sizes, bw, scheme, colocated, workers):
    fwd = [1e-3 * s / 1e5 for s in sizes]
    bwd = [2 * f for f in fwd]
    t = ps.step(sizes, fwd, bwd, scheme, bw, workers, colocated=colocated)
    share = (workers - 1) / workers if colocated else 1.0
    one = share * 4 * sum(sizes) / bw        # every push (or every reply) on the wire
    compute = sum(fwd) + sum(bwd)
    assert t >= max(compute, 2 * one if colocated else one) * (1 - 1e-9)
    assert t <= (compute + 2 * one) * (1 + 1e-9)   # nothing overlapped


def test_fast_link_is_compute():
    sizes, fwd, bwd = ps.profile("resnet50", 32, 10e12)
    for scheme in ps.SCHEMES:
        t = ps.step(sizes, fwd, bwd, scheme, 1e15, 4)
        assert t == pytest.approx(sum(fwd) + sum(bwd), rel=1e-3)


def test_bad_input_names_argument():
    with pytest.raises(ValueError, match="scheme"):
        ps.step([1], [0.0], [0.0], "ring", 1e6, 2)
    with pytest.raises(ValueError, match="bandwidth"):
        ps.step([1], [0.0], [0.0], "p3", 0.0, 2)
    with pytest.raises(ValueError, match="workers"):
        ps.step([1], [0.0], [0.0], "p3", 1e6, 0)
    with pytest.raises(ValueError, match="sizes"):
        ps.step([1, 2], [0.0], [0.0], "p3", 1e6, 2)


@pytest.mark.parametrize("name,params,gflops", [
    ("resnet50", 25.6e6, 7.7), ("vgg19", 143.7e6, 39.2), ("resnet101", 44.5e6, 15.2)])
def test_layer_profiles_match_the_papers(name, params, gflops):
    # He et al. 2016 Table 1 (3.8 / 7.6 G multiply-adds), Simonyan and Zisserman 2015 (19.6 G)
    ls = layers(name)
    assert sum(math.prod(s) for s, _ in ls) == pytest.approx(params, rel=0.01)
    assert sum(f for _, f in ls) / 1e9 == pytest.approx(gflops, rel=0.03)
    assert [s for s, _ in ls] == list(MODELS[name][0])
