"""DeMo (decoupled momentum): the DCT, the full-extraction reduction, bytes, errors."""
import math

import pytest
import torch

from lab.aggregate.demo import DeMo, dct_matrix
from lab.comm import Collective
from lab.train import TrainConfig, train_many

BASE = TrainConfig(steps=6, batch_size=16, lr=0.1, eval_every=0, seed=3)
N = 4810  # the digits MLP's parameters


def test_dct_is_orthonormal_and_is_scipys():
    d = dct_matrix(16)
    assert torch.allclose(d @ d.T, torch.eye(16), atol=1e-5)
    scipy_fft = pytest.importorskip("scipy.fft")
    x = torch.randn(16)
    ref = torch.tensor(scipy_fft.dct(x.double().numpy(), type=2, norm="ortho")).float()
    assert torch.allclose(d @ x, ref, atol=1e-5)


def test_extraction_leaves_the_rest_in_the_momentum():
    agg = DeMo(Collective(), chunk=8, k=2, beta=0.5, sign=False)
    g = torch.randn(24)  # three whole chunks
    q = agg.reduce(g, "flat", 0)  # world of one: Q is this rank's q
    assert torch.allclose(q + agg.momentum["flat"], g, atol=1e-5)  # m = q + residual
    coef = q.view(3, 8) @ dct_matrix(8).T
    assert ((coef.abs() > 1e-6).sum(1) <= 2).all()  # k components per chunk


def test_full_extraction_without_sign_is_sgd_on_the_average():
    """k = chunk, no sign: m is emptied each step, so the update is lr * mean_i g_i; the same
    run with dense allreduce and plain SGD (from scratch: no momentum anywhere)."""
    dense = BASE
    demo = BASE.with_(aggregator="demo", aggregator_kw={"chunk": 16, "k": 16, "beta": 0.9,
                                                        "sign": False})
    a, b = train_many([dense, demo], 2, progress=False)
    assert torch.allclose(torch.tensor(a.loss), torch.tensor(b.loss), atol=1e-4)
    assert b.test_loss[-1] == pytest.approx(a.test_loss[-1], abs=1e-4)


def test_bytes_per_step_match_the_formula():
    cfg = BASE.with_(aggregator="demo", aggregator_kw={"chunk": 32, "k": 4})
    (h,) = train_many([cfg], 2, progress=False)
    per = math.ceil(N / 32) * 4 * (4 + 2)  # float32 values + int16 indices per chunk
    assert h.bytes == [per] * BASE.steps
    assert DeMo(Collective(), chunk=32, k=4).payload_bytes(N) == per


@pytest.mark.parametrize("kw, word", [({"k": 0}, "k"), ({"chunk": 3}, "chunk"),
                                      ({"chunk": 8, "k": 9}, "k"), ({"beta": 1.0}, "beta")])
def test_bad_arguments_are_named(kw, word):
    with pytest.raises(ValueError, match=word):
        BASE.with_(aggregator="demo", aggregator_kw=kw)


def test_momentum_in_the_optimizer_is_refused():
    with pytest.raises(ValueError, match="momentum"):
        BASE.with_(aggregator="demo", momentum=0.9)


def test_non_finite_gradient_is_refused():
    with pytest.raises(FloatingPointError, match="non-finite"):
        DeMo(Collective()).reduce(torch.tensor([1.0, float("nan")]), "flat", 0)
