"""lab.bench.lookahead and lab.bench.ema_heldout on made-up rows (what the claims of Part 9.5 take),
their configurations, and the compressed mu_t schedule of lab.pipeline.nesterov."""
import numpy as np
import pytest

from lab.bench.ema_heldout import TAUS, shares
from lab.bench.lookahead import RUNS, configs, cost, gaps, recovered
from lab.pipeline.nesterov import AUTHORS_UPDATES, mu, psi
from lab.pipeline.optim import make_optimizer


def test_configs_stash_every_asynchronous_run_and_pair_it_with_one_stage():
    cfgs = configs(8, seed=1)
    for name in RUNS:
        c, ref = cfgs[name, 8], cfgs[name, 1]
        assert c.schedule == "async-stash" and c.stages == 8 and c.model_kw["layers"] == 6
        assert ref.stages == 1 and ref.optimizer == c.optimizer and ref.beta1 == c.beta1
        assert ref.mu_schedule == c.mu_schedule and ref.steps == c.steps
    assert cfgs["AdamW 0.9 + stash", 8].beta1 == 0.9 and cfgs["authors", 8].recompute
    assert cfgs["GPipe AdamW 0.9, equal updates", 8].steps == 2 * cfgs["authors", 8].steps
    with pytest.raises(ValueError, match="stages"):
        configs(5)


def test_compressed_schedule_is_the_authors_squeezed():
    U = 1000
    assert psi("compressed", U) == pytest.approx(0.004 * AUTHORS_UPDATES / U)
    t = np.arange(1, U + 1)
    assert np.allclose(mu(t, 0.99, "compressed", U), mu(t * AUTHORS_UPDATES / U, 0.99))
    with pytest.raises(ValueError, match="updates"):
        psi("compressed")
    c = configs(4)["NAdamW 0.99 + stash, compressed mu", 4]
    opt = make_optimizer(c, [torch_param()])
    assert opt.param_groups[0]["momentum_decay"] == pytest.approx(psi("compressed", 2 * c.steps))


def torch_param():
    import torch
    return torch.nn.Parameter(torch.zeros(2))


def test_authors_mu_stays_below_095_for_a_third_of_their_run():
    m = mu(np.arange(1, AUTHORS_UPDATES + 1), 0.99)
    assert int(np.argmax(m >= 0.95)) == 15_406 and m.mean() == pytest.approx(0.929, abs=5e-4)


def test_shares_and_gaps_on_made_up_rows():
    rows = [{"run": "A", "stages": 8, "seed": s, "staleness cost": 0.04, "held-out loss": 2.0}
            for s in (0, 1)] + [{"run": "B", "stages": 8, "seed": s, "staleness cost": 0.01 * (s + 1),
                                 "held-out loss": 2.1} for s in (0, 1)]
    assert cost(rows, "A", 8) == {0: 0.04, 1: 0.04}
    assert recovered(rows, "A", "B", 8) == pytest.approx([0.75, 0.5])
    assert gaps(rows, "B", "A", 8) == pytest.approx([0.1, 0.1])
    H = {"fresh (tau 0)": 1.0, "no averaging": 1.5}
    H.update({f"overwrite, tau {t}": 2.0 for t in TAUS})
    H.update({f"EMA 0.9, tau {t}": 1.25 for t in TAUS})
    er = [{"run": k, "seed": 0, "held-out loss (mean model)": v} for k, v in H.items()]
    assert shares(er, 0, "EMA 0.9") == pytest.approx({t: 0.75 for t in TAUS})
    assert shares(er, 0, "no averaging") == pytest.approx({t: 0.5 for t in TAUS})


def test_shards_keep_each_replica_on_its_own_stretch():
    from lab import data as data_mod
    from lab.pipeline.shards import shard_batch
    d = data_mod.load("text", seed=0)
    n, R = d.num_train, 4
    for r in range(R):
        x, _ = shard_batch(d, 3, 64, r, R)
        assert x.shape[0] == 64
    import torch
    g = torch.Generator().manual_seed((0 * 1_000_003 + 3) * 257 + 2)
    idx = torch.randint(2 * n // R, 3 * n // R, (64,), generator=g)
    assert (idx >= 2 * n // R).all() and (idx < 3 * n // R).all()
    assert torch.equal(shard_batch(d, 3, 64, 2, R)[0], d._take(idx, d.x_train, d.y_train)[0])
    with pytest.raises(ValueError, match="replica"):
        shard_batch(d, 0, 4, 4, R)
