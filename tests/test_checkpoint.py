"""Checkpoint and resume: a run stopped after step s and resumed ends with the same parameters
as a run that never stopped (bitwise, on the CPU, with a fixed seed) and one continuous
history; a real run killed with SIGKILL resumes too. Every registered codec and aggregator
hands its state over through :mod:`lab.state`."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from lab import aggregate, compress, state
from lab.comm import Collective
from lab.run import History, latest
from lab import data, models
from lab.run.checkpoint import read_meta
from lab.runtime import launch
from lab.train import TrainConfig, train

ROOT = Path(__file__).resolve().parents[1]
BASE = TrainConfig(steps=8, batch_size=32, lr=0.1, eval_every=2, seed=3)


def _rank_state(d: Path, step: int, rank: int) -> dict:
    return torch.load(d / f"step-{step:08d}" / f"rank{rank}.pt", weights_only=False)


def _tensors(obj):
    """Every tensor in a nested state, in a stable order."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for k in sorted(obj, key=repr):
            yield from _tensors(obj[k])
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _tensors(v)


def _same_end(a: Path, b: Path, steps: int, workers: int) -> None:
    for r in range(workers):
        x, y = _rank_state(a, steps, r), _rank_state(b, steps, r)
        for k in x["model"]:
            assert torch.equal(x["model"][k], y["model"][k]), f"rank {r}: parameter {k} differs"
        for key in ("optimizer", "schemes", "avg"):  # "avg": a pipeline's sparse averager
            if key not in x:
                continue
            tx, ty = list(_tensors(x[key])), list(_tensors(y[key]))
            assert len(tx) == len(ty) and all(torch.equal(p, q) for p, q in zip(tx, ty)), key


def _stop_and_resume(cfg, tmp_path, workers=2, at=4, setup_bytes=0, overlapped=False):
    full, half = tmp_path / "full", tmp_path / "half"
    h_full = train(cfg, workers, checkpoint_every=at, checkpoint_dir=full)
    shutil.copytree(full / f"step-{at:08d}", half / f"step-{at:08d}")  # as if stopped at `at`
    h_res = train(cfg, workers, resume=half, checkpoint_every=cfg.steps, checkpoint_dir=half)
    _same_end(full, half, cfg.steps, workers)
    assert h_res.steps == cfg.steps and h_res.loss == h_full.loss
    assert h_res.eval_step == h_full.eval_step and h_res.test_acc == h_full.test_acc
    if overlapped:  # which step counts an exchange that overlaps the next depends on timing
        assert sum(h_res.bytes) == sum(h_full.bytes)
    else:
        assert h_res.bytes == h_full.bytes
    assert [r - f for r, f in zip(h_res.rank_bytes, h_full.rank_bytes)] == [setup_bytes] * workers
    # the checkpointed part is kept as measured; the resumed part is measured anew
    assert h_res.compute_s[:at] == h_full.compute_s[:at]
    assert h_res.compute_s[at:] != h_full.compute_s[at:]
    return h_full, h_res


@pytest.mark.parametrize("name, changes", [
    ("dense allreduce, momentum", dict(momentum=0.9)),
    ("top-k + error feedback", dict(compressor="topk", compressor_kw={"density": 0.1},
                                    error_feedback=True)),
    ("powersgd", dict(aggregator="powersgd", aggregator_kw={"rank": 2})),
    ("ar-topk var", dict(aggregator="artopk", aggregator_kw={"variant": "var", "density": 0.1})),
    ("local sgd", dict(averaging="local", averaging_kw={"period": 3})),
    ("adam + random-k", dict(optimizer="adam", lr=0.01, compressor="randomk",
                             compressor_kw={"density": 0.2})),
])
def test_stopped_and_resumed_equals_uninterrupted(name, changes, tmp_path):
    _stop_and_resume(BASE.with_(**changes), tmp_path)


def test_checkpointing_does_not_change_the_run(tmp_path):
    cfg = BASE.with_(compressor="topk", compressor_kw={"density": 0.1}, error_feedback=True)
    plain = train(cfg, 2)
    ck = train(cfg, 2, checkpoint_every=3, checkpoint_dir=tmp_path)
    assert plain.loss == ck.loss and plain.test_acc == ck.test_acc
    # the newest two checkpoints are kept, the last step always, each folder complete
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000006", "step-00000008"]
    assert sorted(p.name for p in (tmp_path / "step-00000008").iterdir()) == \
        ["meta.json", "rank0.pt", "rank1.pt"]


@pytest.mark.parametrize("workers", [2, 3])
def test_p3_schedule_stopped_and_resumed_equals_uninterrupted(workers, tmp_path):
    """The overlap engine drains the exchange in flight when checkpointed, and its bytes are
    counted in the resumed run's first step; the resumed launch
    measures its layer profile once more (one allreduce of 8 bytes per layer, tag 'plan') but
    plans from the checkpointed one, so the same messages carry the same slices."""
    cfg = BASE.with_(schedule="p3", momentum=0.9, schedule_kw={"slice_size": 4096},
                     batch_size=48)
    model = models.make("mlp", data.load("digits"))
    layers = len({name.rsplit(".", 1)[0] for name, _ in model.named_parameters()})
    _stop_and_resume(cfg, tmp_path, workers=workers, setup_bytes=8 * layers, overlapped=True)


def test_bad_checkpoint_arguments_are_named(tmp_path):
    with pytest.raises(ValueError, match="checkpoint_dir"):
        train(BASE, 1, checkpoint_every=2)
    with pytest.raises(ValueError, match="checkpoint_every"):
        train(BASE, 1, checkpoint_every=-1, checkpoint_dir=tmp_path)
    with pytest.raises(ValueError, match="resume="):
        train(BASE, 1, resume=tmp_path / "nothing")
    with pytest.raises(ValueError, match="sync='ssp' runs its own loop"):
        train(BASE.with_(sync="ssp"), 3, checkpoint_every=2, checkpoint_dir=tmp_path)


def test_resume_refuses_another_config_naming_the_fields(tmp_path):
    train(BASE.with_(steps=2), 1, checkpoint_every=2, checkpoint_dir=tmp_path)
    with pytest.raises(ValueError, match=r"in lr \(checkpoint 0.1, given 0.2\)"):
        train(BASE.with_(steps=2, lr=0.2), 1, resume=tmp_path)
    with pytest.raises(ValueError, match="workers"):
        train(BASE.with_(steps=2), 2, resume=tmp_path)


SLOW = TrainConfig(steps=24, batch_size=32, eval_every=6, seed=1, momentum=0.9,
                   compressor="topk", compressor_kw={"density": 0.1}, error_feedback=True,
                   network="10Mbps,10ms")
SLOW_FLAGS = ["--workers", "2", "--steps", "24", "--batch-size", "32", "--eval-every", "6",
              "--seed", "1", "--momentum", "0.9", "--compressor", "topk", "--compressor-kw",
              "density=0.1", "--error-feedback", "--network", "10Mbps,10ms"]


def test_a_cli_run_killed_with_sigkill_resumes_to_the_same_parameters(tmp_path):
    out, whole = tmp_path / "out", tmp_path / "whole"
    cmd = [sys.executable, "-m", "lab", "train", *SLOW_FLAGS, "--out", str(out)]
    proc = subprocess.Popen(cmd + ["--checkpoint-every", "4"], cwd=ROOT, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ck = out / "checkpoint"
    try:
        deadline = time.monotonic() + 180
        while latest(ck) is None and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert latest(ck) is not None, "no checkpoint was written"
        os.killpg(proc.pid, signal.SIGKILL)  # the launcher and its ranks, mid-run
    finally:
        proc.wait()
    stopped = int(latest(ck).name.split("-")[1])
    assert 4 <= stopped < 24, "the run was not killed mid-way"
    assert read_meta(latest(ck))["config"] == json.loads(json.dumps(SLOW.to_dict()))
    done = subprocess.run(cmd + ["--checkpoint-every", "24", "--resume", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    ref = train(SLOW, 2, checkpoint_every=24, checkpoint_dir=whole)
    _same_end(ck, whole, 24, 2)
    h = History.from_json(out / "history.json")
    assert h.loss == ref.loss and h.steps == 24 and h.eval_step == [6, 12, 18, 24]


def _roundtrip(make, step):
    """Run a few steps, hand the state to a fresh object, take one more step on both."""
    torch.manual_seed(0)
    inputs = [[torch.randn(40, 25), torch.randn(25)] for _ in range(4)]
    a, b = make(), make()
    for i, x in enumerate(inputs[:3]):
        step(a, [t.clone() for t in x], i)
    state.load_state_dict(b, state.state_dict(a))
    return step(a, inputs[3], 3), step(b, [t.clone() for t in inputs[3]], 3)


def _equal(x, y):
    if isinstance(x, torch.Tensor):
        return torch.equal(x, y)
    if isinstance(x, (list, tuple)):
        return len(x) == len(y) and all(_equal(p, q) for p, q in zip(x, y))
    return x == y


@pytest.mark.parametrize("name", compress.REGISTRY.names())
def test_every_codec_hands_its_state_over(name):
    out_a, out_b = _roundtrip(lambda: compress.make(name).bind(0, 1),
                              lambda c, x, i: c.compress(torch.cat([t.reshape(-1) for t in x]),
                                                         key="flat")[0])
    assert _equal(out_a, out_b)


@pytest.mark.parametrize("name", aggregate.REGISTRY.names())
def test_every_aggregator_hands_its_state_over(name):
    def make():
        extra = {"compressor": compress.make("topk", density=0.1)} \
            if aggregate.REGISTRY.get(name).uses_compressor else {}
        return aggregate.make(name, comm=Collective(), **extra)
    if name in ("krum", "multikrum", "trimmed_mean"):  # need more than one rank to aggregate:
        agg = make()                                   # memoryless rules, no tensor state
        assert not list(_tensors(state.state_dict(agg)))
        return
    out_a, out_b = _roundtrip(make, lambda agg, x, i: agg.aggregate(x, i))
    assert _equal(out_a, out_b)


def test_a_stateless_codec_has_no_state_beyond_its_generator():
    c = compress.make("topk").bind(0, 1)
    c.compress(torch.randn(100))
    assert {k for k, v in state.state_dict(c).items() if isinstance(v, torch.Tensor)} == set()


PIPE = dict(model="gpt", data="text", stages=2, replicas=2, microbatches=2, steps=6,
            batch_size=16, lr=0.3, optimizer="sgd", model_kw={"layers": 2, "dim": 16},
            schedule="1f1b", dp="sparse-avg", dp_kw={"fraction": 0.2, "delay": 2}, seed=1)


def test_a_pipeline_with_sparse_averaging_resumes_to_the_same_weights(tmp_path):
    from lab.pipeline import PipelineConfig
    from lab.pipeline import train as ptrain
    cfg = PipelineConfig(**PIPE)
    full, half = tmp_path / "full", tmp_path / "half"
    h_full = ptrain(cfg, checkpoint_every=3, checkpoint_dir=full, progress=False)
    shutil.copytree(full / "step-00000003", half / "step-00000003")
    h_res = ptrain(cfg, resume=half, checkpoint_every=6, checkpoint_dir=half, progress=False)
    _same_end(full, half, 6, 4)
    for r in range(4):  # the averages still in flight at the checkpoint were carried over
        x, y = _rank_state(full, 6, r)["avg"], _rank_state(half, 6, r)["avg"]
        assert x["sent"] == y["sent"] and all(torch.equal(p, q) for p, q in
                                              zip(_tensors(x), _tensors(y)))
    assert h_res.loss == h_full.loss and h_res.bytes == h_full.bytes
    assert h_res.series["dp_bytes"] == h_full.series["dp_bytes"]
    assert h_res.compute_s[3:] != h_full.compute_s[3:]
    with pytest.raises(ValueError, match="schedule='async'"):
        ptrain(PipelineConfig(**{**PIPE, "schedule": "async"}), checkpoint_every=2,
               checkpoint_dir=tmp_path)


def _ddp_resume(ctx, which):
    """Train 6 steps with the hook; and 3, save (model, optimizer, hook state), load into a new
    DDP model in the same process group, train 3 more: both must end equal."""
    import io

    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    from lab.hooks import CodecHookState, codec_hook
    from lab.hooks.powersgd import PowerSGDHookState, powersgd_hook

    def fresh():
        torch.manual_seed(0)
        # one parameter: DDP lays a bucket out anew after its first step (gradients in the
        # order they became ready), so a flat per-bucket state fits only the same layout
        model = nn.Linear(20, 6, bias=False)
        ddp = DDP(model, bucket_cap_mb=1000)
        if which == "codec":
            state = CodecHookState(compress.make("topk", density=0.1), error_feedback=True)
            hook = codec_hook
        else:
            state, hook = PowerSGDHookState(rank=2, start_iter=1), powersgd_hook
        return model, ddp, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), state, hook

    g = torch.Generator().manual_seed(100 + ctx.rank)
    data = [(torch.randn(16, 20, generator=g), torch.randint(0, 6, (16,), generator=g))
            for _ in range(6)]

    def steps(model, ddp, opt, batches):
        for x, y in batches:
            opt.zero_grad()
            nn.functional.cross_entropy(ddp(x), y).backward()
            opt.step()

    model, ddp, opt, state, hook = fresh()
    ddp.register_comm_hook(state, hook)
    steps(model, ddp, opt, data[:3])
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "hook": state}, buf)
    steps(model, ddp, opt, data[3:])
    model2, ddp2, opt2, _, hook2 = fresh()
    saved = torch.load(io.BytesIO(buf.getvalue()), weights_only=False)
    model2.load_state_dict(saved["model"])
    opt2.load_state_dict(saved["opt"])
    ddp2.register_comm_hook(saved["hook"], hook2)
    steps(model2, ddp2, opt2, data[3:])
    same = all(torch.equal(p, q) for p, q in zip(model.parameters(), model2.parameters()))
    return same, len(saved["hook"].comm.ledger.records), len(state.comm.ledger.records)


@pytest.mark.parametrize("which", ["codec", "powersgd"])
def test_a_ddp_hook_state_is_saved_with_the_model_and_resumes(which):
    for same, kept, total in launch(_ddp_resume, 2, which, timeout=120):
        assert same
        assert kept == total >= 6  # the ledger came along (and went on counting)


def test_parameter_server_bsp_stopped_and_resumed_equals_uninterrupted(tmp_path):
    """Only the server (rank 0) holds state; resumed, it re-grants every worker, which is
    where BSP stands at a step boundary, and each worker's step count travels in the reply."""
    cfg, at = BASE.with_(sync="bsp", momentum=0.9), 4
    full, half = tmp_path / "full", tmp_path / "half"
    h_full = train(cfg, 3, checkpoint_every=at, checkpoint_dir=full)
    shutil.copytree(full / f"step-{at:08d}", half / f"step-{at:08d}")
    h_res = train(cfg, 3, resume=half, checkpoint_every=cfg.steps, checkpoint_dir=half)
    assert sorted(p.name for p in (full / f"step-{cfg.steps:08d}").iterdir()) == \
        ["meta.json", "rank0.pt"]
    x, y = _rank_state(full, cfg.steps, 0), _rank_state(half, cfg.steps, 0)
    for k in x["model"]:
        assert torch.equal(x["model"][k], y["model"][k]), k
    assert all(torch.equal(p, q) for p, q in zip(_tensors(x["optimizer"]), _tensors(y["optimizer"])))
    assert h_res.loss == h_full.loss and h_res.bytes == h_full.bytes
    assert h_res.eval_step == h_full.eval_step and h_res.test_acc == h_full.test_acc
    assert x["clock"] == y["clock"] == [0, cfg.steps, cfg.steps]


def test_asynchronous_parameter_server_resumes_to_the_end(tmp_path):
    cfg = BASE.with_(sync="asp")
    train(cfg, 3, checkpoint_every=4, checkpoint_dir=tmp_path)
    shutil.rmtree(tmp_path / f"step-{cfg.steps:08d}")  # as if killed after step 4..7
    h = train(cfg, 3, resume=tmp_path, checkpoint_every=cfg.steps, checkpoint_dir=tmp_path)
    assert h.steps == cfg.steps and sum(h.series["grads_by_worker"]) == 2 * cfg.steps
