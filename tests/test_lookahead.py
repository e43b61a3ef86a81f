"""The look-ahead's optimizer (lab.pipeline.nesterov): NAdam as Dozat's Algorithm 2, with
torch's warm-up of mu_t or with mu_t = beta1 from the first update; the authors' weight
stashing with recompute (lab.pipeline.worker); the emulated device time (forward_s); and the
refusals of what does not fit together."""
import numpy as np
import pytest
import torch

from lab.pipeline import PipelineConfig
from lab.pipeline.loop import run_raw
from lab.pipeline.nesterov import mu, nadam

TINY = dict(model="gpt", microbatches=2, batch_size=16, lr=1e-2, model_kw={"layers": 2, "dim": 16})


def _dozat(grads, lr, beta1, mus, beta2=0.999, eps=1e-8):
    """NAdam from scratch (Dozat, ICLR 2016 workshop, Algorithm 2, in torch's bias-correction
    form): m_t = beta1 m + (1 - beta1) g; x -= lr [(1 - mu_t) / (1 - prod mu_1..t) g
    + mu_{t+1} / (1 - prod mu_1..t+1) m_t] / (sqrt(v_t / (1 - beta2^t)) + eps)."""
    x, m, v, prod = torch.zeros_like(grads[0]), 0.0, 0.0, 1.0
    for t, g in enumerate(grads, start=1):
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        prod *= mus(t)
        den = (v / (1 - beta2 ** t)).sqrt() + eps
        x = x - lr * ((1 - mus(t)) / (1 - prod) * g + mus(t + 1) / (1 - prod * mus(t + 1)) * m) / den
    return x


@pytest.mark.parametrize("schedule", ["warmup", "constant"])
def test_nadam_is_dozats_algorithm_with_the_schedules_mu(schedule):
    torch.manual_seed(0)
    grads = [torch.randn(20, dtype=torch.float64) for _ in range(6)]
    p = torch.nn.Parameter(torch.zeros(20, dtype=torch.float64))
    opt = nadam([p], lr=0.1, beta1=0.99, decoupled=False, mu_schedule=schedule)
    for g in grads:
        p.grad = g.clone()
        opt.step()
    want = _dozat(grads, 0.1, 0.99, lambda t: mu(t, 0.99, schedule))
    torch.testing.assert_close(p.detach(), want, rtol=1e-5, atol=1e-6)  # torch keeps prod mu in fp32


def test_torch_warms_mu_up_for_thousands_of_updates_constant_is_beta1_at_once():
    """torch's (and the authors') mu_t = beta1 (1 - 0.5 * 0.96^(0.004 t)): about beta1 / 2 over
    a few hundred updates, beta1 only after tens of thousands (the authors run 50,000)."""
    assert mu(1, 0.99) == pytest.approx(0.99 * (1 - 0.5 * 0.96 ** 0.004))
    assert all(0.49 < mu(t, 0.99) < 0.52 for t in (1, 100, 200))
    assert mu(300, 0.99) < 0.53 and mu(5000, 0.99) < 0.8 and mu(50_000, 0.99) > 0.989
    assert all(mu(t, 0.99, "constant") == 0.99 for t in (1, 2, 100))


def test_recompute_at_the_stash_gives_the_stash_run_with_less_activation_memory():
    s = dict(TINY, stages=4, steps=3, schedule="async-stash", optimizer="nadamw", beta1=0.99,
             mu_schedule="constant")
    kept, recomputed = run_raw([PipelineConfig(**s), PipelineConfig(recompute=True, **s)],
                               progress=False)
    for a, b in zip(kept, recomputed):
        assert torch.equal(a["weights"], b["weights"])  # the same gradients, bit for bit
        assert max(b["stash_peak"]) == max(a["stash_peak"]) > 0  # both stash the weights
        fwd, bwd = dict(map(tuple, b["fwd_sum"])), dict(map(tuple, b["bwd_sum"]))
        assert all(fwd[k] == v for k, v in bwd.items())  # backward at the forward's weights
        if a["stage"] in (1, 2):  # the blocks (stage 0 keeps token ids, stage 3 its loss's graph)
            assert max(b["act_peak"]) < max(a["act_peak"]) / 4  # only the inputs are kept


def test_an_emulated_device_fixes_the_time_of_every_pass_and_slow_ranks_multiply_it():
    f = 0.02
    (ranks,) = run_raw([PipelineConfig(**dict(TINY, stages=2, steps=4, schedule="gpipe",
                                              forward_s=f, slow_ranks={1: 2.0}))], progress=False)
    for r in ranks:  # m = 2 forward passes of f and 2 backward passes of 2f a step, x slowdown
        want = 2 * 3 * f * (2.0 if r["stage"] == 1 else 1.0)
        assert all(want <= c < want + 0.05 for c in r["compute"])
    # GPipe: stage 0 waits for stage 1's two forwards and two backwards (at 2x) before its own
    step = np.diff([0.0] + [max(r["ends"][t] for r in ranks) for t in range(4)])
    assert np.median(step) >= f * (1 + 2 * 2 + 2 * 2 * 2 + 2) - 1e-3


@pytest.mark.parametrize("kw, match", [
    (dict(optimizer="adamw", mu_schedule="constant"), "mu_schedule='constant' is NAdam's"),
    (dict(schedule="async", recompute=True), "recompute=True .* needs schedule='async-stash'"),
    (dict(link="kernel"), "link='kernel' needs a network"),
    (dict(link="kernel", replicas=2, network="1Gbps", dp_network="100Mbps,5ms"),
     "dp_network='100Mbps,5ms' and network='1Gbps' differ in bandwidth"),
    (dict(forward_s=0.0), "forward_s"),
])
def test_what_does_not_fit_together_is_refused_by_name(kw, match):
    with pytest.raises(ValueError, match=match):
        PipelineConfig(**{**dict(TINY, stages=2), **kw})


def test_the_look_ahead_schedule_takes_the_constant_mu():
    cfg = PipelineConfig(stages=2, schedule="async-nesterov", mu_schedule="constant")
    from lab.pipeline.optim import make_optimizer
    opt = make_optimizer(cfg, [torch.nn.Parameter(torch.zeros(3))])
    assert opt.param_groups[0]["momentum_decay"] > 1e5  # 0.96^(psi t) is 0 from t = 1
    PipelineConfig(stages=2, replicas=2, link="kernel", network="1Gbps,1ms",
                   dp_network="1Gbps,40ms")  # latencies may differ on a kernel link


def test_the_ablations_change_one_thing_at_a_time_and_every_run_has_its_reference():
    from lab.pipeline.ablation import LOOKAHEAD, NO_DELAY, ema_configs, lookahead_configs
    runs = {n: c.to_dict() for n, c in lookahead_configs(4, 10).items()}
    differ = lambda a, b: {k for k in runs[a] if runs[a][k] != runs[b][k]} - {"label", "name"}  # noqa: E731
    assert differ("AdamW", "NAdamW") == {"optimizer", "mu_schedule"}  # the look-ahead alone
    assert differ("NAdamW", "authors, mu = beta1") == {"schedule", "recompute"}  # the stash alone
    refs = lookahead_configs(1, 10, names=list(LOOKAHEAD))
    assert set(refs) == set(NO_DELAY.values())
    for n, r in NO_DELAY.items():  # a reference is its run on one stage, without the stash
        a, b = runs[n], refs[r].to_dict()
        assert {k for k in a if a[k] != b[k]} - {"label", "name", "schedule", "recompute"} == {"stages"}
    e = {k: c.to_dict() for k, c in ema_configs(10).items()}
    assert {k for k in e[4, "none", None] if e[4, "none", None][k] != e[4, "ema", 0.5][k]} == {"dp_kw"}
