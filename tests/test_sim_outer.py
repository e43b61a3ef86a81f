"""lab.sim.outer: DiLoCo's utilisation is the closed form of Part 11; Streaming's overlap."""
import math

import pytest

from lab.sim.outer import bandwidth_for, utilisation


def closed_form(bw, H, n, t, bits, p, lat):
    comm = 2 * (p - 1) / p * bits * n / bw + 2 * (p - 1) * lat
    return H * t / (H * t + comm)


@pytest.mark.parametrize("bw,H,p", [(1e9, 100, 3), (1e8, 10, 2), (5e9, 500, 8)])
def test_diloco_is_the_closed_form(bw, H, p):
    assert utilisation(bw, H, 10e9, 5.0, 8, p, 0.1) == pytest.approx(
        closed_form(bw, H, 10e9, 5.0, 8, p, 0.1), rel=1e-12)


def test_bandwidth_for_inverts_utilisation():
    b = bandwidth_for(0.9, 100, 10e9, 5.0, bits=8, sites=3)
    assert utilisation(b, 100, 10e9, 5.0, bits=8, sites=3) == pytest.approx(0.9, rel=1e-6)
    assert bandwidth_for(0.999999, 1, 10e9, 1e-3, sites=3, latency_s=0.1) == math.inf


def test_streaming_overlap_hides_the_exchange():
    # one fragment's exchange shorter than tau inner steps: nothing exposed
    assert utilisation(1e10, 100, 1e9, 5.0, fragments=4, tau=1, sites=2, latency_s=0.0) == 1.0
    plain = utilisation(1e8, 100, 1e9, 5.0, sites=2)
    assert utilisation(1e8, 100, 1e9, 5.0, sites=2, fragments=4, tau=2) > plain
    assert utilisation(1e8, 100, 1e9, 5.0, sites=2, fragments=4, tau=0) < plain   # 4 x latency


def test_bad_input_names_argument():
    with pytest.raises(ValueError, match="fragments"):
        utilisation(1e9, 10, 1e6, 1.0, fragments=3)
    with pytest.raises(ValueError, match="util"):
        bandwidth_for(1.0, 10, 1e6, 1.0)
    with pytest.raises(ValueError, match="bandwidth_bps"):
        utilisation(0.0, 10, 1e6, 1.0)
