"""AsyncMesh's non-blocking sparse averaging (lab.pipeline.sparse_avg, overlap=True) and the
authors' optimizer settings (lab.pipeline.optim, lab.pipeline.lr) on real 2 x 2 meshes."""
import math

import pytest
import torch

from lab.comm import Network
from lab.pipeline import PipelineConfig
from lab.pipeline.loop import run_raw
from lab.pipeline.lr import scheduled_lr
from lab.pipeline.optim import make_optimizer

BASE = dict(model="gpt", stages=2, replicas=2, microbatches=2, batch_size=16, lr=1e-2,
            model_kw={"layers": 2, "dim": 16}, schedule="async-nesterov")


def _sparse(overlap, delay, **kw):
    return PipelineConfig(dp="sparse-avg", dp_kw={"fraction": 0.2, "delay": delay, "overlap": overlap},
                          **{**BASE, **kw})


def test_non_blocking_equals_blocking_exactly_and_delay_zero_is_synchronous():
    runs = run_raw([_sparse(False, 0, steps=4), _sparse(True, 0, steps=4),
                    _sparse(False, 3, steps=4), _sparse(True, 3, steps=4)], progress=False)
    for a, b in ((runs[0], runs[1]), (runs[2], runs[3])):
        for ra, rb in zip(a, b):  # the same parameters, bit for bit: only the waiting differs
            assert torch.equal(ra["weights"], rb["weights"])
            assert ra["dp_bytes"] == rb["dp_bytes"] == [round(0.2 * ra["params"]) * 4] * 4
    assert runs[1][0]["avg_merged"] == [1, 1, 1, 1] and runs[3][0]["avg_merged"] == [0, 0, 0, 1]
    assert not torch.equal(runs[1][0]["weights"], runs[3][0]["weights"])  # the delay matters


def test_non_blocking_hides_the_slow_replica_link_blocking_pays_it_every_step():
    link = "1Gbps,40ms"
    modeled = Network.parse(link).time("allreduce", 4 * 500, 2)  # >= 2 x 40 ms, whatever the bytes
    steps = 8
    blocking, overlapped = run_raw([_sparse(False, 6, steps=steps, dp_network=link),
                                    _sparse(True, 6, steps=steps, dp_network=link)], progress=False)
    for rb, ro in zip(blocking, overlapped):
        assert all(w >= 0.95 * modeled for w in rb["avg_wait"])       # a sleep: a lower bound
        # in flight while 6 steps compute: at most what is left of one transfer, once
        assert sum(ro["avg_wait"]) < 0.5 * sum(rb["avg_wait"])


def test_authors_lr_schedule_warms_up_then_decays_to_a_tenth():
    assert scheduled_lr(1.0, 0, 100, "cosine", warmup=10) == pytest.approx(0.1, abs=1e-6)
    assert scheduled_lr(1.0, 9, 100, "cosine", warmup=10) == pytest.approx(1.0)
    assert scheduled_lr(1.0, 10, 100, "cosine", warmup=10) == pytest.approx(1.0)
    assert scheduled_lr(1.0, 55, 100, "cosine", warmup=10) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert scheduled_lr(1.0, 100, 100, "cosine", warmup=10) == pytest.approx(0.1)
    assert scheduled_lr(0.5, 70, 100) == 0.5
    with pytest.raises(ValueError, match="lr_schedule"):
        scheduled_lr(1.0, 0, 10, "linear")


@pytest.mark.parametrize("name,cls,decoupled", [("adamw", torch.optim.AdamW, None),
                                                 ("nadamw", torch.optim.NAdam, True),
                                                 ("nadam", torch.optim.NAdam, False)])
def test_optimizers_take_the_same_momentum_and_decay(name, cls, decoupled):
    cfg = PipelineConfig(optimizer=name, beta1=0.99, weight_decay=0.01, stages=2)
    opt = make_optimizer(cfg, [torch.nn.Parameter(torch.zeros(3))])
    g = opt.param_groups[0]
    assert type(opt) is cls and g["betas"] == (0.99, 0.999) and g["weight_decay"] == 0.01
    if decoupled is not None:
        assert g["decoupled_weight_decay"] is decoupled
    la = make_optimizer(PipelineConfig(schedule="async-nesterov", weight_decay=0.01, stages=2),
                        [torch.nn.Parameter(torch.zeros(3))])
    assert la.param_groups[0]["betas"][0] == 0.99 and la.param_groups[0]["decoupled_weight_decay"]


def test_clipping_and_schedule_change_the_run_and_bad_values_are_refused():
    plain, tuned = run_raw([PipelineConfig(steps=3, **{**BASE, "replicas": 1}),
                            PipelineConfig(steps=3, clip=1e-3, lr_schedule="cosine", warmup=2,
                                           weight_decay=0.01, **{**BASE, "replicas": 1})], progress=False)
    assert not torch.equal(plain[0]["weights"], tuned[0]["weights"])
    for kw, match in (({"beta1": 1.0}, "beta1"), ({"clip": 0.0}, "clip"), ({"warmup": -1}, "warmup"),
                      ({"lr_schedule": "step"}, "lr_schedule"), ({"weight_decay": -1}, "weight_decay"),
                      ({"dp_network": "fast"}, "network"), ({"optimizer": "lion"}, "optimizer")):
        with pytest.raises(ValueError, match=match):
            PipelineConfig(stages=2, **kw)
    with pytest.raises(ValueError, match="overlap"):
        PipelineConfig(stages=2, replicas=2, dp="sparse-avg", dp_kw={"overlap": "yes"})


def test_cli_takes_the_authors_settings_and_a_replica_link(tmp_path, capsys):
    from lab.cli.pipeline import main
    assert main(["--stages", "2", "--replicas", "2", "--schedule", "async-nesterov", "--steps", "3",
                 "--batch-size", "8", "--microbatches", "2", "--model-kw", "layers=2", "dim=16",
                 "--weight-decay", "0.01", "--clip", "10", "--lr-schedule", "cosine", "--warmup", "2",
                 "--dp", "sparse-avg", "--dp-kw", "fraction=0.1", "delay=1", "overlap=True",
                 "--dp-network", "1Gbps,1ms", "--out", str(tmp_path)]) == 0
    assert "stage1/replica1" in capsys.readouterr().out
    with pytest.raises(SystemExit):  # argparse refuses a schedule it does not know
        main(["--stages", "2", "--lr-schedule", "linear"])


def test_non_blocking_runs_at_most_tau_steps_ahead_of_a_slow_replica_then_waits():
    """A replica 3x slower (emulated devices: 10 ms forward, 20 ms backward): the fast one runs
    free until the average of step t - tau needs the slow one's step t - tau, then waits on
    every step; it is never more than tau steps ahead."""
    from lab.pipeline import train
    from lab.pipeline.report import lead
    h = train(PipelineConfig(model="gpt", stages=1, replicas=2, microbatches=1, batch_size=8,
                             steps=8, lr=1e-2, model_kw={"layers": 2, "dim": 16}, schedule="gpipe",
                             forward_s=0.01, slow_ranks={1: 3.0}, dp="sparse-avg",
                             dp_kw={"fraction": 0.1, "delay": 2}), progress=False)
    waits = h.series["avg_wait/stage0/replica0"]
    assert 0 < lead(h, fast=0, slow=1) <= 2
    assert max(waits[:2]) < 0.005 and min(waits[-3:]) > 0.03  # 60 ms a step behind, then waits
