"""DiLoCo and Streaming DiLoCo in real processes: their defining reductions, bytes, resume."""
import math
import shutil

import pytest
import torch

from lab.argspec import ArgumentError
from lab.averaging.diloco import OuterSGD
from lab.run.checkpoint import load as load_ck
from lab.train import TrainConfig, train, train_many

BASE = TrainConfig(steps=12, batch_size=16, lr=0.1, eval_every=0, seed=3)
N = 4810  # the digits MLP's parameters
SD = "streaming_diloco"


@pytest.fixture(scope="module")
def runs():
    cfgs = [BASE.with_(averaging="local", averaging_kw={"period": 1}),
            BASE.with_(averaging="diloco", averaging_kw={"period": 1, "outer_lr": 1.0,
                                                         "outer_momentum": 0.0}),
            BASE.with_(averaging="diloco", averaging_kw={"period": 4}),
            BASE.with_(averaging=SD, averaging_kw={"period": 4, "fragments": 1, "tau": 0,
                                                   "alpha": 0.0}),
            BASE.with_(averaging=SD, averaging_kw={"period": 4, "fragments": 2, "tau": 1,
                                                   "codec": "qsgd", "codec_bits": 3})]
    return train_many(cfgs, 2, progress=False)


def test_h1_outer_sgd_lr1_is_model_averaging_every_step(runs):
    local, diloco = runs[0], runs[1]
    assert torch.allclose(torch.tensor(local.loss), torch.tensor(diloco.loss), atol=1e-6)
    assert diloco.test_loss[-1] == pytest.approx(local.test_loss[-1], abs=1e-6)
    assert diloco.bytes == local.bytes


def test_one_fragment_tau0_is_diloco(runs):
    diloco, stream = runs[2], runs[3]
    assert stream.loss == diloco.loss and stream.test_loss == diloco.test_loss
    assert stream.bytes == diloco.bytes


def test_bytes_per_outer_step_match_the_formula(runs):
    diloco, stream = runs[2], runs[4]
    assert diloco.bytes == [0, 0, 0, 4 * N] * 3  # one fp32 allreduce of theta every H
    frag = N // 2  # qsgd, 3 bits: a norm per 512 values, a sign bit, 3 level bits
    per = 4 * math.ceil(frag / 512) + math.ceil(frag / 8) + math.ceil(3 * frag / 8)
    assert stream.bytes == [0, per, 0, per] * 3  # staggered: one fragment every H / P steps
    assert stream.series["fragments_sent"] == [0.0, 1.0, 0.0, 1.0] * 3
    assert max(stream.bytes) * 2 * 8 < max(diloco.bytes) * 1.3  # peak: P x and ~8 x less


def test_outer_sgd_is_pytorch_nesterov():
    torch.manual_seed(0)
    theta, ref = torch.randn(10), None
    ref = torch.nn.Parameter(theta.clone())
    opt = torch.optim.SGD([ref], lr=0.7, momentum=0.9, nesterov=True)
    mine = OuterSGD(10, 0.7, 0.9, True)
    for _ in range(4):
        d = torch.randn(10)
        ref.grad = d.clone()
        opt.step()
        mine.step(theta, d)
    assert torch.allclose(theta, ref.detach(), atol=1e-6)


@pytest.mark.parametrize("kw", [
    {"period": 4},
    {"period": 4, "fragments": 2, "tau": 1, "codec": "qsgd", "codec_bits": 3}])
def test_outer_loop_resumes_bitwise(kw, tmp_path):
    name = "diloco" if "fragments" not in kw else SD
    cfg = BASE.with_(averaging=name, averaging_kw=kw, optimizer="adam", lr=0.01)
    full, half = tmp_path / "full", tmp_path / "half"
    h_full = train(cfg, 2, checkpoint_every=6, checkpoint_dir=full)
    shutil.copytree(full / "step-00000006", half / "step-00000006")
    h_res = train(cfg, 2, resume=half, checkpoint_every=12, checkpoint_dir=half)
    assert h_res.loss == h_full.loss and h_res.bytes == h_full.bytes
    for r in range(2):
        a, b = (load_ck(d / "step-00000012", r) for d in (full, half))
        for k in a["model"]:
            assert torch.equal(a["model"][k], b["model"][k]), f"rank {r}: {k}"
        sa, sb = a["schemes"]["averaging"], b["schemes"]["averaging"]
        assert torch.equal(sa["theta"], sb["theta"])  # the global parameters
        assert torch.equal(sa["outer"]["buf"], sb["outer"]["buf"])  # the outer momentum


@pytest.mark.parametrize("name, kw, word", [
    ("diloco", {"period": 0}, "period"),
    ("diloco", {"outer_momentum": 1.0}, "outer_momentum"),
    ("diloco", {"outer_lr": -1.0}, "outer_lr"),
    (SD, {"period": 4, "tau": 4}, "tau"),
    (SD, {"alpha": 1.5}, "alpha"),
    (SD, {"fragments": 0}, "fragments"),
])
def test_bad_arguments_are_named(name, kw, word):
    with pytest.raises(ValueError, match=word):
        BASE.with_(averaging=name, averaging_kw=kw)


def test_bad_codec_is_named():
    with pytest.raises(ValueError, match="codec='nope'"):
        BASE.with_(averaging=SD, averaging_kw={"codec": "nope"})
    with pytest.raises(ValueError, match="codec_bits"):
        BASE.with_(averaging=SD, averaging_kw={"codec": "topk", "codec_bits": 3})
    assert issubclass(ArgumentError, ValueError)
