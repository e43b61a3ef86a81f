"""Pipeline parallelism (lab.pipeline): exact gradients of the synchronous schedules, the
staleness of the asynchronous one, weight stashing, failures and refused meshes."""
import pytest
import torch
from torch.nn.utils import parameters_to_vector

from lab import data as data_mod, models
from lab.pipeline import PipelineConfig, train
from lab.pipeline.async_1f1b import async_1f1b, staleness
from lab.cli.pipeline import main as cli_main
from lab.pipeline.gpipe import bubble_fraction, gpipe
from lab.pipeline.loop import run_raw
from lab.pipeline.nesterov import corrected_lr
from lab.pipeline.onef1b import one_f_one_b
from lab.pipeline.stages import partition, split
from lab.runtime import LaunchError


@pytest.mark.parametrize("name,kw,stages", [("gpt", {"layers": 3}, 5), ("mlp", {"depth": 3}, 3)])
def test_stages_compose_to_the_model(name, kw, stages):
    data = data_mod.load("text" if name == "gpt" else "digits")
    model = models.make(name, data, **kw)
    x, _ = data.batch(0, 8)
    h = x
    for piece in split(model, stages):
        h = piece(h)
    assert torch.equal(h, model(x))


def test_partition_is_contiguous_balanced_and_refuses_too_many_stages():
    assert [list(r) for r in partition([1] * 7, 3)] in ([[0, 1, 2], [3, 4], [5, 6]],
                                                        [[0, 1], [2, 3, 4], [5, 6]], [[0, 1], [2, 3], [4, 5, 6]])
    costs = [1, 4, 1, 1, 1, 4]
    parts = partition(costs, 3)
    assert [i for r in parts for i in r] == list(range(6))                # contiguous, in order
    assert max(sum(costs[i] for i in r) for r in parts) == 5               # the best possible
    with pytest.raises(ValueError, match="stages"):
        partition([1, 1, 1], 4)


def test_every_schedule_runs_each_microbatch_forward_then_backward_once():
    for fn in (gpipe, one_f_one_b, async_1f1b):
        for s in range(4):
            acts = fn(s, 4, 3, 2)
            f = [k for a, k in acts if a == "F"]
            b = [k for a, k in acts if a == "B"]
            assert sorted(f) == sorted(b) == list(range(6))
            assert all(acts.index(("F", k)) < acts.index(("B", k)) for k in f)


def test_1f1b_keeps_at_most_stages_minus_s_microbatches_in_flight():
    for s in range(4):
        live = peak = 0
        for a, _ in one_f_one_b(s, 4, 8, 1):
            live += {"F": 1, "B": -1, "U": 0}[a]
            peak = max(peak, live)
        assert peak == 4 - s
        assert max(1 for _ in gpipe(s, 4, 8, 1)) and 8 == sum(a == "F" for a, _ in gpipe(s, 4, 8, 1))


@pytest.mark.parametrize("schedule,replicas", [("gpipe", 1), ("1f1b", 2)])
def test_synchronous_schedules_give_the_unsplit_models_gradient(schedule, replicas):
    stages, lr = (4 if replicas == 1 else 2), 0.5
    cfg = PipelineConfig(model="gpt", data="text", stages=stages, replicas=replicas,
                         schedule=schedule, microbatches=4, steps=1, batch_size=16, lr=lr,
                         optimizer="sgd", dp="allreduce" if replicas > 1 else "none",
                         model_kw={"layers": 2, "dim": 32})
    ranks = run_raw([cfg], progress=False)[0]
    # the reference: the whole model in this process, one SGD step on the whole global batch
    data = data_mod.load("text")
    model = models.make("gpt", data, **cfg.model_kw)
    x, y = data.batch(0, cfg.batch_size)
    models.loss_fn("lm")(model(x), y).backward()
    want = [parameters_to_vector([p - lr * p.grad for p in piece.parameters()]).detach()
            for piece in split(model, stages)]
    for r in ranks:
        torch.testing.assert_close(r["weights"], want[r["stage"]], atol=2e-6, rtol=1e-5)


def test_async_staleness_per_stage_equals_the_schedules_theory_and_stash_uses_forward_weights():
    base = dict(model="gpt", stages=4, microbatches=3, steps=3, batch_size=12, lr=3e-3,
                model_kw={"layers": 2, "dim": 32})
    plain, stashed = [train(PipelineConfig(schedule=s, **base), progress=False)
                      for s in ("async", "async-stash")]
    for h in (plain, stashed):
        for s in range(4):
            got = h.series[f"staleness/stage{s}"]
            assert [tuple(v) for v in got] == [(k, staleness(s, 4, k)) for k in range(9)]
            assert max(t for _, t in got) == 3 - s
    for s in range(4):
        fwd = dict(map(tuple, stashed.series[f"fwd_sum/stage{s}"]))
        bwd = dict(map(tuple, stashed.series[f"bwd_sum/stage{s}"]))
        assert fwd == bwd  # backward evaluated at exactly the forward pass's weights
        fwd = dict(map(tuple, plain.series[f"fwd_sum/stage{s}"]))
        bwd = dict(map(tuple, plain.series[f"bwd_sum/stage{s}"]))
        stale = [k for k in fwd if staleness(s, 4, k) > 0]
        assert all(fwd[k] != bwd[k] for k in stale) and (s == 3) == (not stale)
    assert max(stashed.series["stash_peak/stage0"]) > 0 == max(plain.series["stash_peak/stage0"])


def test_gpipe_bubble_formula():
    assert bubble_fraction(4, 4) == pytest.approx(3 / 7)
    assert bubble_fraction(1, 8) == 0.0


def test_pipemare_lr_correction_warms_up_from_lr_over_tau():
    assert corrected_lr(1.0, 4, 0, 100) == pytest.approx(0.25)
    assert corrected_lr(1.0, 4, 100, 100) == pytest.approx(1.0)
    assert corrected_lr(1.0, 4, 50, 100) == pytest.approx(0.5)
    assert corrected_lr(1.0, 4, 10, 0) == 1.0


def _dies_on_stage_2(ctx, cfg):
    from lab.pipeline import loop, stages
    if ctx.rank == 2:
        calls = {"n": 0}
        forward = stages.Block.forward

        def broken(self, x):
            calls["n"] += 1
            if calls["n"] == 3:
                raise RuntimeError("stage 2 lost its GPU")
            return forward(self, x)
        stages.Block.forward = broken
    return loop.run_rank(ctx, cfg)


def test_a_dying_stage_ends_the_whole_mesh_with_its_traceback():
    from lab.runtime import launch
    cfg = PipelineConfig(stages=4, schedule="1f1b", steps=3, batch_size=8, model_kw={"layers": 2, "dim": 16})
    with pytest.raises(LaunchError, match="stage 2 lost its GPU") as e:
        launch(_dies_on_stage_2, 4, cfg, timeout=60, progress=False)
    assert e.value.rank == 2 and "broken" in e.value.remote_traceback


@pytest.mark.parametrize("kw,match", [
    ({"stages": 5}, "stages"), ({"stages": 2, "replicas": 2, "batch_size": 10}, "divisible"),
    ({"schedule": "zigzag"}, "schedule"), ({"dp": "sparse-avg", "replicas": 2, "dp_kw": {"delay": -1}}, "delay"),
    ({"slow_ranks": {7: 2.0}}, "slow_ranks"), ({"network": "fast"}, "network"),
    ({"schedule": "async-nesterov", "schedule_kw": {"momentum": 1.5}}, "momentum")])
def test_bad_meshes_and_arguments_are_refused_before_launch(kw, match):
    with pytest.raises(ValueError, match=match):
        PipelineConfig(**kw)


def test_mesh_must_fill_the_world():
    cfg = PipelineConfig(stages=2, replicas=2)
    with pytest.raises(ValueError, match="world size"):
        cfg.check(8)
    with pytest.raises(ValueError, match="world size"):
        run_raw([PipelineConfig(stages=2), PipelineConfig(stages=4)], progress=False)


def test_cli_end_to_end(tmp_path, capsys):
    assert cli_main(["--stages", "2", "--schedule", "async-stash", "--steps", "3", "--batch-size", "8",
                     "--model-kw", "layers=2", "dim=16", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "stage1" in out and (tmp_path / "history.json").exists() and (tmp_path / "plot.png").exists()
    assert cli_main(["--stages", "9"]) == 2


KERNEL = __import__("lab.comm.kernel", fromlist=["unavailable"]).unavailable()


@pytest.mark.skipif(KERNEL is not None, reason=f"kernel links unavailable: {KERNEL}")
def test_a_kernel_link_runs_the_mesh_on_shaped_nics_with_the_same_arithmetic(tmp_path, capsys):
    b = dict(model="gpt", stages=2, replicas=2, microbatches=2, batch_size=16, lr=1e-2, steps=3,
             model_kw={"layers": 2, "dim": 16}, schedule="async-nesterov", dp="sparse-avg",
             dp_kw={"fraction": 0.2, "delay": 1}, network="100Mbps,1ms", dp_network="100Mbps,5ms")
    model, kernel = (run_raw([PipelineConfig(**b, link=link)], progress=False)[0]
                     for link in ("model", "kernel"))
    for a, k in zip(model, kernel):
        assert (a["link"], k["link"]) == ("model", "kernel")  # every rank on its shaped NIC
        assert torch.equal(a["weights"], k["weights"]) and a["wire_sent"] == k["wire_sent"]
    assert cli_main(["--stages", "2", "--steps", "2", "--batch-size", "8", "--model-kw", "layers=2",
                     "dim=16", "--link", "kernel", "--network", "100Mbps,1ms",
                     "--out", str(tmp_path)]) == 0


def test_cli_refuses_a_kernel_link_whose_axes_differ_in_rate_naming_them(capsys):
    assert cli_main(["--stages", "2", "--replicas", "2", "--batch-size", "8", "--link", "kernel",
                     "--network", "1Gbps,1ms", "--dp-network", "10Mbps,50ms"]) == 2
    err = capsys.readouterr().err
    assert "dp_network='10Mbps,50ms' and network='1Gbps,1ms' differ in bandwidth" in err
