"""Every attack changes exactly the Byzantine ranks' messages; ALIE and IPM forge what their
papers say from the honest statistics."""
import pytest
import torch

from lab.attack.alie import paper_z
from lab.comm import Collective, CommLedger
from lab.runtime import launch
from lab.train import TrainConfig
from lab.train.loop import engine

ATTACKS = {"signflip": {}, "gaussian": {}, "labelflip": {}, "alie": {"z": 1.5},
           "ipm": {"epsilon": 0.5}, "nan": {}}


def _messages(ctx):
    out = {}
    for name, kw in ATTACKS.items():
        cfg = TrainConfig(steps=1, batch_size=12, byzantine=1, attack=name, attack_kw=kw)
        e = engine(ctx, cfg, Collective(ledger=CommLedger()))
        x, y = e.data.batch(0, cfg.batch_size, ctx.rank, ctx.world_size, cfg.seed)

        def grads(x, y):
            e.optimizer.zero_grad()
            e.loss_fn(e.model(x), y).backward()
            return [p.grad.clone() for p in e.params]
        honest = torch.cat([g.reshape(-1) for g in grads(x, y)])
        sent = e.attack.on_gradient(grads(*e.attack.on_batch(x, y, 0)), 0)
        out[name] = (honest, torch.cat([g.reshape(-1) for g in sent]), e.attack.byzantine)
    return out


@pytest.fixture(scope="module")
def messages():
    return launch(_messages, 3, progress=False)


@pytest.mark.parametrize("name", list(ATTACKS))
def test_only_the_byzantine_ranks_change_their_message(messages, name):
    for rank, m in enumerate(messages):
        honest, sent, byz = m[name]
        assert byz == (rank == 2)  # the last rank is Byzantine; rank 0 stays honest
        assert torch.equal(honest, sent) != byz, (name, rank)


def test_alie_and_ipm_forge_from_the_honest_statistics(messages):
    for name, forge in (("alie", lambda mu, sd: mu - 1.5 * sd), ("ipm", lambda mu, sd: -0.5 * mu)):
        honest = torch.stack([m[name][0] for m in messages])
        expected = forge(honest.mean(0), honest.std(0, unbiased=False))
        assert torch.allclose(messages[2][name][1], expected, atol=1e-6), name


def test_signflip_and_nan_messages(messages):
    honest, sent, _ = messages[2]["signflip"]
    assert torch.equal(sent, -4.0 * honest)
    assert torch.isnan(messages[2]["nan"][1]).all()


def test_alie_z_follows_the_paper():
    # Baruch et al.: n = 50, f = 12 -> s = 14, z = Phi^-1(36 / 50) ~ 0.58
    assert paper_z(50, 12) == pytest.approx(0.5828, abs=1e-3)


@pytest.mark.parametrize("attack, kw, data, match", [
    ("labelflip", {}, "linreg", "classification"),
    ("signflip", {"scale": -1}, "digits", "scale"),
    ("gaussian", {"sigma": 0}, "digits", "sigma"),
    ("ipm", {"epsilon": 0}, "digits", "epsilon"),
    ("ipm", {"eps": 0.1}, "digits", "unknown"),
    ("alie", {"z": float("nan")}, "digits", "z"),
])
def test_bad_attack_arguments_are_refused_before_launch(attack, kw, data, match):
    with pytest.raises(ValueError, match=match):  # a misspelt argument already at construction
        TrainConfig(data=data, byzantine=1, attack=attack, attack_kw=kw, batch_size=12).check_workers(3)
