"""A published model's layers as ops on a device (issue 52, item 5): at scale 1 the ops carry
exactly the FLOPs the model's layer list states (so a GPU profile and the FLOP model price the
same arithmetic), a tiny profile and stacked step run on the CPU, and a measured compute
replaces the FLOP rate in ``scenario``."""
import pytest

from lab.sim import device_profile as dp
from lab.sim.models import layers, scenario


@pytest.mark.parametrize("name", ["resnet50", "vgg19", "bert-base", "sockeye", "alexnet"])
def test_the_ops_carry_the_layers_flops(name):
    stated = sum(f for _, f in layers(name))
    assert sum(op["flops"] for op in dp.ops(name, 4)) == pytest.approx(4 * stated, rel=1e-9)


def test_a_conv_keeps_its_side_and_a_matrix_its_rows():
    first, *_ = dp.ops("resnet50", 2)
    assert first["kind"] == "conv" and first["hw"] == 112 and first["shape"] == [64, 3, 7, 7]
    qkv = next(op for op in dp.ops("bert-base", 2) if op["shape"] == [2304, 768])
    assert qkv["kind"] == "matmul" and qkv["rows"] == 2 * 128


def test_a_tiny_profile_and_its_stacked_step_run_on_the_cpu():
    prof = dp.layer_profile("resnet50", batch=1, scale=0.0625, repeats=1)
    assert len(prof["layers"]) == 54 and prof["compute_s"] > 0 and prof["tflops"] > 0
    assert all(r["seconds"] > 0 for r in prof["layers"])
    assert dp.stack_step("resnet50", batch=1, scale=0.0625, repeats=1) > 0


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match="batch"):
        dp.ops("resnet50", 0)
    with pytest.raises(ValueError, match="scale"):
        dp.ops("resnet50", 1, scale=2.0)
    with pytest.raises(ValueError, match="model"):
        dp.ops("gpt-5", 1)
    with pytest.raises(ValueError, match="compute_s"):
        scenario("resnet50", "fp32", 16, "10Gbps", 1e14, compute_s=float("nan"))


def test_a_measured_compute_replaces_the_flop_rate():
    s = scenario("resnet50", "fp32", 16, "10Gbps", 1e14, compute_s=0.123)
    assert s["compute_s"] == pytest.approx(0.123)
    assert scenario("resnet50", "fp32", 16, "10Gbps", 1e14)["compute_s"] != pytest.approx(0.123)
