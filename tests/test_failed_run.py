"""A failed run keeps what it had: when a rank raises, dies or hangs, ``train`` raises
``RunFailed`` with the history up to the last completed step and the error (rank, cause,
traceback), which ``save`` writes next to each other."""
import json
import os
import signal

import pytest

from lab import attack
from lab.run import RunFailed
from lab.runtime import LaunchError
from lab.train import TrainConfig, train


def _import_me():
    """Referenced from the config, so the ranks import this module and its attack below."""


@attack.register("fail-at")
class FailAt(attack.base.Attack):
    """Test-only: the Byzantine rank raises (or is SIGKILLed) when step ``at`` starts."""

    name = "fail-at"

    def __init__(self, engine, byzantine, at: int = 5, how: str = "raise", load=None):
        super().__init__(engine, byzantine)
        self.at, self.how = at, how

    def on_batch(self, x, y, step):
        if self.byzantine and step == self.at:
            if self.how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError(f"injected failure at step {step}")
        return x, y


def _cfg(how):
    return TrainConfig(steps=12, batch_size=32, eval_every=2, byzantine=1, attack="fail-at",
                       attack_kw={"at": 5, "how": how, "load": _import_me})


def test_a_rank_that_raises_leaves_the_history_so_far_and_the_error(tmp_path):
    with pytest.raises(RunFailed) as e:
        train(_cfg("raise"), 2, timeout=60)
    err = e.value
    assert isinstance(err, LaunchError) and isinstance(err.__cause__, LaunchError)
    assert err.history.steps == 5 and err.history.eval_step == [2, 4]
    assert len(err.history.bytes) == 5 and all(b > 0 for b in err.history.bytes)
    assert err.error["rank"] == 1 and "injected failure at step 5" in err.error["cause"]
    assert "on_batch" in err.error["traceback"]
    assert "injected failure at step 5" in str(err)  # the launch error's message is kept
    paths = err.save(tmp_path / "out")
    assert [p.name for p in paths] == ["history.json", "error.json"]
    saved = json.loads(paths[1].read_text())
    assert saved["rank"] == 1 and saved["steps_completed"] == 5
    assert json.loads(paths[0].read_text())["loss"] == err.history.loss


def test_a_rank_killed_by_sigkill_also_leaves_the_history():
    with pytest.raises(RunFailed) as e:
        train(_cfg("kill"), 2, timeout=60)
    assert e.value.history.steps == 5
    assert e.value.error["rank"] == 1 and "SIGKILL" in e.value.error["cause"]


def test_a_run_that_fails_before_any_step_has_no_history(tmp_path):
    cfg = _cfg("raise").with_(attack_kw={"at": 0, "how": "raise", "load": _import_me})
    with pytest.raises(RunFailed) as e:
        train(cfg, 2, timeout=60)
    assert e.value.history is None
    assert [p.name for p in e.value.save(tmp_path)] == ["error.json"]


def test_a_diverging_pipeline_keeps_the_steps_every_stage_completed():
    from lab.pipeline import PipelineConfig
    from lab.pipeline import train as ptrain
    cfg = PipelineConfig(model="gpt", data="text", stages=2, replicas=1, microbatches=2, steps=12,
                         batch_size=8, lr=30.0, optimizer="sgd", model_kw={"layers": 2, "dim": 16},
                         schedule="gpipe")
    with pytest.raises(RunFailed) as e:  # the loss overflows: the last stage refuses it
        ptrain(cfg, progress=False)
    h, err = e.value.history, e.value.error
    assert err["rank"] == 1 and "non-finite loss" in err["cause"]
    assert 1 <= h.steps < 12 and all(x < float("inf") for x in h.loss)
    assert len(h.compute_s) == len(h.comm_s) == h.steps and h.wall_s > 0
