"""The one-process emulator of the pipeline (lab.pipeline.emulate) against the multi-process
runner: the same losses and final weights to float rounding, for the asynchronous schedule
with and without weight stashing, the authors' stash + recompute with the compressed mu_t
schedule, and GPipe; and its delays are PipeDream's, min(k, p - 1 - s)."""
import pytest
import torch

from lab.pipeline import PipelineConfig
from lab.pipeline.ablation import AUTHORS
from lab.pipeline.async_1f1b import staleness
from lab.pipeline.emulate import emulate
from lab.pipeline.loop import run_raw

BASE = dict(model="gpt", data="text", model_kw={"layers": 2, "dim": 32}, stages=4,
            microbatches=2, steps=6, batch_size=32, lr=2e-3, warmup=2, **AUTHORS)
CONFIGS = [dict(schedule="async-stash", optimizer="adamw", beta1=0.9),
           dict(schedule="async-stash", recompute=True, optimizer="nadamw", beta1=0.99,
                mu_schedule="compressed"),
           dict(schedule="async", optimizer="adamw", beta1=0.99),
           dict(schedule="gpipe", optimizer="adamw")]


@pytest.fixture(scope="module")
def pairs():
    cfgs = [PipelineConfig(**BASE, **kw) for kw in CONFIGS]
    return [(c, ranks, emulate(c)) for c, ranks in zip(cfgs, run_raw(cfgs))]


@pytest.mark.parametrize("i", range(len(CONFIGS)))
def test_emulator_matches_runner(pairs, i):
    cfg, ranks, emu = pairs[i]
    ranks = sorted(ranks, key=lambda r: r["stage"])
    assert emu["loss"] == pytest.approx(ranks[-1]["loss"], abs=1e-6, rel=0)
    for r, w in zip(ranks, emu["weights"]):
        assert torch.allclose(r["weights"], w, rtol=0, atol=1e-6), cfg.schedule
        if cfg.schedule.startswith("async"):
            assert sorted(r["staleness"]) == sorted(emu["staleness"][r["stage"]])


def test_emulator_delays_are_pipedreams():
    e = emulate(PipelineConfig(**{**BASE, "stages": 4, "steps": 3}, schedule="async-stash",
                               optimizer="adamw"))
    for s, log in enumerate(e["staleness"]):
        assert [tau for _, tau in sorted(log)] == [staleness(s, 4, k) for k in range(6)]
    assert e["updates"] == 6 and e["heldout"] > 0


def test_emulator_refuses_replicas():
    with pytest.raises(ValueError, match="replicas"):
        emulate(PipelineConfig(**{**BASE, "stages": 1}, replicas=2, schedule="async",
                               optimizer="adamw"))
