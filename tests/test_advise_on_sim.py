"""The advisor prices a step with lab.sim's model, not a copy of its own (issue 52, item 1)."""
import math

import pytest

from lab.advise.estimate import comm_seconds, sim_config, step_seconds
from lab.advise.profile import StepProfile
from lab.comm import Network
from lab.sim import Cluster, Config, predict
from lab.sim.calibrate import shapes
from lab.sim.codec import traffic
from lab.sim.overlap import overlapped_step

LINK = Network.parse("1Gbps,1ms")


def _mlp_params():
    return sum(math.prod(s) for s in shapes("mlp"))


def test_a_measured_traffic_equal_to_the_formula_prices_as_the_formula():
    # dgc's ledger bytes are the codec's own payload: handing them in changes nothing
    layers = [tuple(s) for s in shapes("mlp")]
    cluster = Cluster(4, LINK.bandwidth, LINK.latency)
    formula = predict(Config(layers, "dgc", cluster, 0.01))
    measured = predict(Config(layers, "dgc", cluster, 0.01, traffic=tuple(traffic("dgc", layers))))
    assert measured.step_s == pytest.approx(formula.step_s, rel=1e-12)


@pytest.mark.parametrize("method,traffic_", [
    ("fp32", {"allreduce": [1, 4e5]}),
    ("dgc", {"allgather": [1, 900.0]}),
    ("powersgd", {"allreduce": [3, 3e4]}),
    ("async-ps", {"recv": [3, 3e5], "send": [3, 3e5]}),
])
def test_the_advisors_step_is_lab_sims_step(method, traffic_):
    prof = StepProfile(method, "mlp", 4, 0.004, 0.001, traffic_, 100_000, comm_s=0.002,
                       server_s=0.001 if method == "async-ps" else 0.0)
    for p in (4, 8):
        pred = predict(sim_config(prof, p, LINK))
        assert step_seconds(prof, p, LINK) == (pred.step_s, pred.comm_s)
    if method != "async-ps":   # compute + codec + the priced traffic, floored by loopback
        step, comm = step_seconds(prof, 4, LINK)
        assert comm == pytest.approx(max(comm_seconds(prof, 4, LINK), 0.002), rel=1e-12)
        assert step == pytest.approx(0.004 + 0.001 + comm, rel=1e-12)


def test_p3_is_priced_by_part_7s_planner_on_the_models_layers():
    n = _mlp_params()
    prof = StepProfile("p3", "mlp", 4, 0.02, 0.0, {"allreduce": [1, 4 * n]}, n, comm_s=0.0)
    sizes = [math.prod(s) for s in shapes("mlp")]
    slow = Network.parse("100Mbps,2ms")
    planned = overlapped_step("p3", sizes, 0.02, Cluster(4, slow.bandwidth, slow.latency))
    assert step_seconds(prof, 4, slow)[0] == pytest.approx(planned, rel=1e-12)
    # overlap hides some of the exchange: less than fp32's step, more than its compute
    fp32 = StepProfile("fp32", "mlp", 4, 0.02, 0.0, {"allreduce": [1, 4 * n]}, n)
    assert 0.02 < planned < step_seconds(fp32, 4, slow)[0]


def test_loopback_still_floors_the_step():
    prof = StepProfile("p3", "mlp", 2, 0.01, 0.0, {"allreduce": [1, 100]}, 1000, comm_s=0.03)
    assert step_seconds(prof, 2, None)[0] == pytest.approx(0.04)
