"""Asynchronous sparse averaging (lab.pipeline.sparse_avg) on a world of one and on a 2 x 2 mesh."""
import pytest
import torch
from torch import nn

from lab.comm import Collective
from lab.pipeline import PipelineConfig
from lab.pipeline.loop import run_raw
from lab.pipeline.sparse_avg import SparseAverager


def _averager(**kw):
    torch.manual_seed(0)
    layer = nn.Linear(10, 10)
    return layer, SparseAverager(layer.parameters(), Collective(), **kw)


def test_subset_depends_on_step_and_stage_only_and_has_the_right_size():
    _, a = _averager(fraction=0.1, seed=3)
    _, b = _averager(fraction=0.1, seed=3)
    assert a.k == 11 and torch.equal(a.subset(5), b.subset(5))
    assert not torch.equal(a.subset(5), a.subset(6))
    assert len(set(a.subset(5).tolist())) == 11


def test_stale_average_is_moved_forward_by_delay_times_the_ema_drift():
    """World of one: the average of x_t is x_t. With a constant drift d per step and the EMA
    warmed up, the merged value after delay tau is x_t + tau * e, e -> d."""
    layer, avg = _averager(fraction=1.0, delay=2, ema=0.5)
    d = torch.full((110,), 0.01)
    history = []
    with torch.no_grad():
        for t in range(30):
            flat = torch.nn.utils.parameters_to_vector(layer.parameters()) + d
            torch.nn.utils.vector_to_parameters(flat, layer.parameters())
            history.append(flat.clone())
            e_before = avg.drift.clone() * 0.5 + 0.5 * d
            avg.after_step(t)
    # at the last step the merge wrote x_{t-2} + 2 e into every coordinate
    got = torch.nn.utils.parameters_to_vector(layer.parameters())
    torch.testing.assert_close(got, history[-3] + 2 * e_before)
    torch.testing.assert_close(e_before, d, atol=1e-6, rtol=0)


def test_without_correction_the_stale_average_overwrites():
    layer, avg = _averager(fraction=1.0, delay=1, ema=None)
    with torch.no_grad():
        x0 = torch.nn.utils.parameters_to_vector(layer.parameters()).clone()
        avg.after_step(0)
        for p in layer.parameters():
            p.add_(1.0)
        avg.after_step(1)
    torch.testing.assert_close(torch.nn.utils.parameters_to_vector(layer.parameters()), x0)


def test_non_finite_parameters_are_not_averaged_away():
    layer, avg = _averager(fraction=0.5)
    with torch.no_grad():
        layer.weight[0, 0] = float("nan")
    with pytest.raises(FloatingPointError, match="non-finite"):
        avg.after_step(0)


@pytest.mark.parametrize("kw", [{"fraction": 0.0}, {"fraction": 1.5}, {"delay": 1.5}, {"ema": 1.0}])
def test_bad_kw_refused(kw):
    with pytest.raises(ValueError, match=next(iter(kw))):
        SparseAverager.check_kw(**kw)


def test_on_a_2x2_mesh_full_sparse_averaging_equals_sync_dp_and_bytes_are_fraction_x_params_x_4():
    base = dict(model="gpt", stages=2, replicas=2, microbatches=2, steps=3, batch_size=16,
                lr=0.3, optimizer="sgd", model_kw={"layers": 2, "dim": 16}, schedule="1f1b")
    runs = run_raw([PipelineConfig(dp="allreduce", **base),
                    PipelineConfig(dp="sparse-avg", dp_kw={"fraction": 1.0, "delay": 0}, **base),
                    PipelineConfig(dp="sparse-avg", dp_kw={"fraction": 0.05, "delay": 2}, **base)],
                   progress=False)
    sync, full, sparse = runs
    for a, b in zip(sync, full):  # parameter averaging every step == gradient averaging (SGD)
        torch.testing.assert_close(a["weights"], b["weights"], atol=1e-5, rtol=1e-5)
    for s in range(2):
        reps = [r for r in sparse if r["stage"] == s]
        assert reps[0]["avg_subset_sum"] == reps[1]["avg_subset_sum"]  # same subset everywhere
        assert not torch.equal(reps[0]["weights"], reps[1]["weights"])  # they drift in between
        for r in reps:
            assert r["dp_bytes"] == [round(0.05 * r["params"]) * 4] * 3  # from the ledger
        # merges start once the delay has passed: none at steps 0, 1, then one per step
        assert reps[0]["avg_merged"] == [0, 0, 1]


def _walk(correction, delay, ema=0.9, steps=12, fraction=0.5):
    """A world of one whose parameters take random steps; returns them after every step."""
    layer, avg = _averager(fraction=fraction, delay=delay, ema=ema, correction=correction)
    g = torch.Generator().manual_seed(1)
    out = []
    with torch.no_grad():
        for t in range(steps):
            for p in layer.parameters():
                p.add_(torch.randn(p.shape, generator=g) * 0.01)
            avg.after_step(t)
            out.append(torch.nn.utils.parameters_to_vector(layer.parameters()).clone())
    return out


def test_progress_rule_adds_back_exactly_the_replicas_own_steps():
    """In a world of one the average is the replica's own value when it sent, so adding back
    its steps since then leaves it where its steps took it: merging is a no-op, even with
    subsets that overlap within the delay (merges are not counted as progress); overwriting
    undoes the steps."""
    free = _walk("none", delay=10**6)  # never merged within the run
    torch.testing.assert_close(_walk("progress", delay=3)[-1], free[-1])
    assert not torch.allclose(_walk("none", delay=3)[-1], free[-1])


def test_ema_with_beta_zero_at_delay_one_is_the_progress_rule_and_delay_zero_leaves_no_choice():
    for a, b in zip(_walk("ema", delay=1, ema=0.0), _walk("progress", delay=1)):
        torch.testing.assert_close(a, b)
    runs = [_walk(c, delay=0) for c in ("none", "ema", "progress")]
    assert all(torch.equal(x, y) for r in runs[1:] for x, y in zip(runs[0], r))
    with pytest.raises(ValueError, match="correction"):
        SparseAverager.check_kw(correction="exact")
