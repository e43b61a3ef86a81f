"""The held-out evaluation of a pipeline run's final model (lab.pipeline.heldout): the loss the
History reports is the loss of the model the ranks trained, scored as lab.train scores it."""
import pytest
import torch
from torch.nn.utils import vector_to_parameters

from lab import data as data_mod, models
from lab.pipeline import PipelineConfig
from lab.pipeline.heldout import final_eval
from lab.pipeline.loop import merge, run_raw
from lab.pipeline.stages import split


def _scratch_loss(model, data) -> float:
    """The held-out loss computed here, without lab.run.build.evaluate."""
    x, y = data.test_set()
    with torch.no_grad():
        return float(torch.nn.functional.cross_entropy(model(x), y))


def test_one_stage_heldout_loss_is_the_final_models_trained_from_scratch():
    steps, lr, batch = 6, 0.3, 32
    cfg = PipelineConfig(model="mlp", data="digits", stages=1, replicas=1, schedule="gpipe",
                         microbatches=1, steps=steps, batch_size=batch, lr=lr, optimizer="sgd",
                         seed=3)
    (ranks,) = run_raw([cfg], progress=False)
    h = merge(cfg, ranks)
    # the reference: the same model, batches and SGD steps in this process
    data = data_mod.load("digits", seed=3)
    model = models.make("mlp", data, seed=3)
    for t in range(steps):
        x, y = data.batch(t, batch, rank=0, world_size=1, seed=3)
        model.zero_grad()
        models.loss_fn(data.task)(model(x), y).backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= lr * p.grad
    want = _scratch_loss(model, data)
    assert h.eval_step == [steps] and len(h.test_loss) == 1
    assert h.test_loss[0] == pytest.approx(want, rel=1e-5, abs=1e-6)
    assert h.test_loss[0] < _scratch_loss(models.make("mlp", data, seed=3), data)  # it trained
    assert 0.0 <= h.final_acc <= 1.0


def test_several_stages_and_replicas_report_the_mean_over_replicas():
    cfg = PipelineConfig(model="mlp", data="digits", stages=2, replicas=2, schedule="1f1b",
                         microbatches=2, steps=4, batch_size=32, lr=3e-3, optimizer="adam",
                         dp="sparse-avg", dp_kw={"fraction": 0.1}, seed=1,
                         model_kw={"depth": 3})
    (ranks,) = run_raw([cfg], progress=False)
    data = data_mod.load("digits", seed=1)
    losses = []
    for rep in range(2):  # each replica's model rebuilt from its stages' weight vectors
        model = models.make("mlp", data, seed=1, depth=3)
        for s, piece in enumerate(split(model, 2)):
            (r,) = [r for r in ranks if r["replica"] == rep and r["stage"] == s]
            vector_to_parameters(r["weights"], piece.parameters())
        losses.append(_scratch_loss(model, data))
    assert losses[0] != losses[1]  # sparse averaging leaves the replicas apart
    loss, _ = final_eval(cfg, ranks)
    assert loss == pytest.approx(sum(losses) / 2, rel=1e-5)
    assert merge(cfg, ranks).test_loss == [loss]


def test_a_rank_without_its_final_state_is_an_error():
    cfg = PipelineConfig(model="mlp", data="digits", stages=1, replicas=1, steps=1)
    (ranks,) = run_raw([cfg], progress=False)
    del ranks[0]["state"]
    with pytest.raises(ValueError, match="state"):
        final_eval(cfg, ranks)
