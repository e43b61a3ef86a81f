"""A run that diverged stops and says so; a non-finite gradient is named with its rank before it
is summed (issue 41, item 12). The checks only read: a run that does not diverge computes the
same numbers with them or without."""
import math
from types import SimpleNamespace

import pytest
import torch

from lab.run import RunFailed
from lab.train import TrainConfig, train, train_many
from lab.train.guard import GROWTH, Diverged, Guard, check_loss, finite


def test_a_loss_that_grows_a_thousandfold_stops_the_run_and_keeps_its_steps():
    cfg = TrainConfig(lr=1e6, steps=30, eval_every=0)
    with pytest.raises(RunFailed) as e:
        train(cfg, 2, progress=False)
    first = str(e.value).splitlines()[0]
    assert "Diverged" in first and "the run diverged" in first and "times its first" in first
    h = e.value.history
    assert h is not None and h.loss[-1] >= GROWTH * h.loss[0]   # the step that diverged is kept
    kept = train(cfg.with_(stop_on_divergence=False), 2, progress=False)   # the flag: on it goes
    assert kept.steps == 30 and max(kept.loss) > GROWTH * kept.loss[0]


def test_a_nan_gradient_is_named_with_its_rank_before_it_is_summed():
    cfg = TrainConfig(steps=4, eval_every=0, byzantine=1, attack="nan")
    with pytest.raises(RunFailed) as e:
        train(cfg, 2, progress=False)
    first = str(e.value).splitlines()[0]
    assert e.value.rank == 1 and first.startswith("rank 1 of 2 failed: ")
    assert "step 0: the gradient rank 1 sends is not finite" in first
    assert "'allreduce' would sum it" in first and "before it was summed" in first
    assert e.value.history is None            # no step was summed
    with pytest.raises(RunFailed) as off:     # without the check: every model is NaN a step later
        train(cfg.with_(stop_on_divergence=False), 2, progress=False)
    assert "loss is nan" in str(off.value).splitlines()[0]


def test_a_robust_rule_still_filters_a_byzantine_nan():
    cfg = TrainConfig(steps=3, eval_every=0, byzantine=1, attack="nan", batch_size=60)
    median = train(cfg.with_(aggregator="median"), 3, progress=False)
    assert median.series["nonfinite_dropped"] == [1, 1, 1] and math.isfinite(median.loss[-1])
    with pytest.raises(RunFailed, match="not finite") as e:   # the mean would average it in
        train(cfg.with_(aggregator="mean"), 3, progress=False)
    assert e.value.rank == 2


@pytest.mark.parametrize("schedule", ["sync", "p3"])
def test_the_checks_change_no_number_of_a_run_that_does_not_diverge(schedule):
    cfg = TrainConfig(steps=12, eval_every=6, schedule=schedule, model_kw={"hidden": 32})
    on, off = train_many([cfg, cfg.with_(stop_on_divergence=False)], 2, progress=False)
    assert on.loss == off.loss and on.test_acc == off.test_acc
    assert sum(on.bytes) == sum(off.bytes)   # P3's thread may book a message to the next step


def test_the_loss_check_and_the_finiteness_test():
    check_loss(2.3 * (GROWTH - 1), 2.3, 5, 0, 0.1)              # large, not yet diverged
    for bad in (2.3 * GROWTH, float("nan"), float("inf")):
        with pytest.raises(Diverged, match="step 5: loss is .* on rank 0"):
            check_loss(bad, 2.3, 5, 0, 0.1)
    check_loss(5.0, 0.0, 1, 0, 0.1)                             # no growth from a zero loss
    big = torch.full((10,), 3e38)                               # finite, but its sum overflows
    assert finite([big, torch.ones(3)]) and finite([])
    assert not finite([torch.ones(3), torch.tensor([1.0, float("nan")])])
    assert not finite([torch.tensor([float("inf"), -float("inf")])])


def test_an_overlapping_schedule_checks_each_gradient_in_backward():
    """fifo and p3 send each layer from backward: a hook checks it first."""
    w = torch.nn.Parameter(torch.ones(3))
    attack = SimpleNamespace(byzantine=False, on_gradient=lambda g, s: g, on_batch=None)
    engine = SimpleNamespace(params=[w], rank=3, attack=attack, aggregator=None,
                             cfg=SimpleNamespace(aggregator="allreduce", attack="none", lr=0.1))
    guard = Guard(engine, "p3")
    guard.step = 7
    (w * 2.0).sum().backward()                                  # finite: nothing happens
    w.grad = None
    with pytest.raises(Diverged, match="step 7: a gradient .* rank 3 sends is not finite"):
        (w * float("nan")).sum().backward()
    assert engine.attack.attack is attack                        # the send is checked too
