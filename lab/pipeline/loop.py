"""The pipeline loop on one rank, and ``train``/``train_many`` that launch it on a mesh.

Each rank builds the whole model from the seed (so every split starts from the unsplit
model's weights), keeps its stage, and executes its schedule's actions. ``link="kernel"``
runs every rank as a node of :mod:`lab.comm.kernel`'s miniature cluster, its NIC shaped to
the config's network (see :class:`~lab.pipeline.mesh.Mesh`). After each step's
update a stage averages with the other replicas of the same stage (``dp``: ``allreduce`` of
gradients, synchronous, after every update; ``sparse-avg``: :class:`SparseAverager`, started
after the step and waited for ``delay`` steps later). The optimizer, clipping and learning-rate
schedule of a stage come from ``lab.pipeline.optim``. The merged
:class:`lab.train.History` has the loss (last stage, mean over replicas), rank 0's bytes, the
wall clock per step, and per-stage series: compute, idle (blocked waiting for a neighbour:
the bubble), send time, peak activation bytes, staleness per micro-batch, a timeline, the end
of each step on that rank (``ends``), and ``avg_wait`` (seconds a step was blocked on the
replica axis).
"""
from __future__ import annotations

import time

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from .. import data as data_mod, models
from ..comm import Network
from ..run.checkpoint import Checkpointer
from ..run.checkpoint import load as load_checkpoint, plan as checkpoint_plan
from ..run.failed import RunFailed
from ..run.history import History
from ..run.straggler import Straggler
from ..runtime import LaunchError, launch
from . import resume as rank_state
from .async_1f1b import async_1f1b
from .config import PipelineConfig
from .failed import partial
from .gpipe import gpipe
from .heldout import final_eval
from .mesh import Mesh
from .onef1b import one_f_one_b
from .optim import make_optimizer, step_lr
from .shards import shard_batch
from .sparse_avg import SparseAverager
from .stages import split
from .worker import StageWorker

SCHEDULES = {"gpipe": gpipe, "1f1b": one_f_one_b, "async": async_1f1b,
             "async-stash": async_1f1b, "async-nesterov": async_1f1b}


def _shapes(pieces, x) -> list[tuple]:
    """The activation shape leaving each stage, for a micro-batch like ``x``."""
    out = []
    with torch.no_grad():
        for p in pieces:
            x = p(x)
            out.append(tuple(x.shape))
    return out


def run_rank(ctx, cfg: PipelineConfig, checkpoint: dict | None = None) -> dict:
    """One rank's stage of ``cfg``: its raw results (see :func:`merge`). Each rank streams a
    line per step to the caller (a failed run keeps them); ``checkpoint``:
    ``{"every", "dir", "resume"}`` (see :func:`train`)."""
    cfg.check(ctx.world_size)
    S, R, m = cfg.stages, cfg.replicas, cfg.microbatches
    mesh = Mesh(ctx.rank, ctx.world_size, S, R, network=cfg.network, dp_network=cfg.dp_network)
    data = data_mod.load(cfg.data, seed=cfg.seed, **cfg.data_kw)
    pieces = split(models.make(cfg.model, data, seed=cfg.seed, **cfg.model_kw), S)
    module, s = pieces[mesh.stage], mesh.stage
    params = list(module.parameters())
    opt = make_optimizer(cfg, params)
    per = cfg.batch_size // R // m
    x0, _ = data.batch(0, per)
    shapes = _shapes(pieces, x0)
    asynchronous = cfg.schedule.startswith("async")
    avg = (SparseAverager(params, mesh.dp, seed=cfg.seed, stage=s, **cfg.dp_kw)
           if cfg.dp == "sparse-avg" and mesh.dp else None)
    if dist.is_initialized():
        dist.barrier()
    clock0 = time.perf_counter()
    worker = StageWorker(module, mesh, models.loss_fn(data.task), asynchronous,
                         cfg.schedule == "async-stash", 1.0 if asynchronous else 1.0 / m,
                         shapes[s - 1] if s else None, shapes[s],
                         Straggler(cfg.slow_ranks.get(ctx.rank, 1.0), cfg.jitter, cfg.seed, ctx.rank),
                         clock0, recompute=cfg.recompute, forward_s=cfg.forward_s)
    batches: dict[int, tuple] = {}
    ends, info = {}, {}
    first, ck = 0, None
    if checkpoint is not None:
        if checkpoint["every"]:
            ck = Checkpointer(checkpoint["every"], checkpoint["dir"], ctx.rank, ctx.world_size,
                              cfg.to_dict(), "pipeline")
        if checkpoint["resume"] is not None:
            first = rank_state.restore(load_checkpoint(checkpoint["resume"], ctx.rank), module, opt,
                                   worker, mesh, avg, ends, info)
            if first:  # the clock goes on from the end of the last checkpointed step
                clock0 = worker.clock0 = time.perf_counter() - ends[first - 1]

    def micro(k):
        t, i = divmod(k, m)
        if t not in batches:
            batches.clear()
            batches[t] = (shard_batch(data, t, cfg.batch_size // R, mesh.replica, R, cfg.seed)
                          if cfg.shards else
                          data.batch(t, cfg.batch_size, rank=mesh.replica, world_size=R, seed=cfg.seed))
        x, y = batches[t]
        return x[i * per:(i + 1) * per], y[i * per:(i + 1) * per]

    def update(step, boundary):
        mesh.ledger.step = step
        if cfg.dp == "allreduce" and mesh.dp:
            flat = parameters_to_vector([p.grad for p in params])
            mesh.dp.allreduce(flat, tag="grad")
            vector_to_parameters(flat / R, [p.grad for p in params])
        step_lr(cfg, opt, worker.version, cfg.steps * (m if asynchronous else 1), S - 1 - s)
        if cfg.clip is not None:
            torch.nn.utils.clip_grad_norm_(params, cfg.clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        worker.version += 1
        if boundary:
            if avg is not None:
                for key, v in avg.after_step(step).items():
                    info.setdefault(key, []).append(v)
            ends[step] = time.perf_counter() - clock0
            ctx.stream((step, ctx.rank, float(np.mean(worker.losses[step])) if mesh.last else None,
                        ends[step], worker.compute.get(step, 0.0)))
            if ck is not None and ck.due(step + 1, cfg.steps):
                ck.write(step + 1, rank_state.capture(module, opt, worker, mesh, avg, ends, info))
            ctx.progress(step + 1, cfg.steps, cfg.name)

    for kind, k in SCHEDULES[cfg.schedule](s, S, m, cfg.steps):
        step = k if kind == "U" and not asynchronous else k // m
        if step < first:  # checkpointed (resume: flushing schedules only)
            continue
        if kind == "F":
            worker.forward(k, step, *micro(k))
        elif kind == "B":
            worker.backward(k, step)
        else:
            update(step, boundary=not asynchronous or k % m == m - 1)
    if avg is not None:
        avg.close()
    mesh.close()
    if dist.is_initialized():
        dist.barrier()
    wall = time.perf_counter() - clock0
    recs = mesh.records() + (avg.records() if avg is not None else [])
    per_step = lambda f: [sum(f(r) for r in recs if r.step == t) for t in range(cfg.steps)]  # noqa: E731
    return {
        "stage": s, "replica": mesh.replica, "link": mesh.pp.link, "wall": wall,
        "ends": [ends[t] for t in range(cfg.steps)],
        "loss": [float(np.mean(worker.losses[t])) for t in range(cfg.steps)] if mesh.last else None,
        "compute": [worker.compute.get(t, 0.0) for t in range(cfg.steps)],
        "idle": [worker.idle.get(t, 0.0) for t in range(cfg.steps)],
        "send": [mesh.send_seconds(t) for t in range(cfg.steps)],
        "bytes": per_step(lambda r: r.bytes), "recv_bytes": per_step(lambda r: r.recv_bytes),
        "wire_sent": per_step(lambda r: r.wire_sent), "wire_recv": per_step(lambda r: r.wire_recv),
        "modeled": per_step(lambda r: r.modeled),
        "pp_bytes": per_step(lambda r: r.bytes if r.tag in ("act", "grad") and r.op == "send" else 0),
        "dp_bytes": per_step(lambda r: r.bytes if r.tag in ("avg", "grad") and r.op == "allreduce" else 0),
        "act_peak": [worker.peak_bytes.get(t, 0) for t in range(cfg.steps)],
        "stash_peak": [worker.peak_stash.get(t, 0) for t in range(cfg.steps)],
        "params": sum(p.numel() for p in params), **worker.log, **info,
        "weights": parameters_to_vector(params).detach().clone(),  # for tests; not in History
        # the stage's final state: merge() assembles each replica's model and evaluates it
        "state": {k: v.detach().cpu().clone() for k, v in module.state_dict().items()},
    }


def merge(cfg: PipelineConfig, ranks: list[dict]) -> History:
    """One History from the raw results of every rank of a run (see :func:`run_raw`). Its
    ``test_loss``/``test_acc`` hold one value, at the last step: the final model's held-out
    loss and accuracy, the mean over replicas (:func:`lab.pipeline.heldout.final_eval`,
    evaluated here in the caller, outside the ledger)."""
    h = History(config=cfg.to_dict(), world_size=cfg.world_size)
    tl, ta = final_eval(cfg, ranks)
    h.eval_step, h.test_loss, h.test_acc = [cfg.steps], [tl], [ta]
    lasts = [r for r in ranks if r["loss"] is not None]
    h.loss = [float(v) for v in np.mean([r["loss"] for r in lasts], axis=0)]
    ends = np.max([r["ends"] for r in ranks], axis=0)
    step_wall = np.diff(np.concatenate([[0.0], ends]))
    compute = np.mean([r["compute"] for r in ranks], axis=0)
    h.compute_s = [float(v) for v in np.minimum(compute, step_wall)]   # the mean stage's compute
    h.comm_s = [float(v) for v in step_wall - np.asarray(h.compute_s)]  # the rest: waiting + communicating
    h.codec_s = [0.0] * cfg.steps
    h.bytes, h.recv_bytes = ranks[0]["bytes"], ranks[0]["recv_bytes"]
    h.wire_sent, h.wire_recv = ranks[0]["wire_sent"], ranks[0]["wire_recv"]
    h.modeled_comm_s = ranks[0]["modeled"]
    h.rank_bytes = [int(sum(r["bytes"])) for r in ranks]
    h.wall_s = float(max(r["wall"] for r in ranks))
    h.series["pp_bytes"] = [int(v) for v in np.sum([r["pp_bytes"] for r in ranks], axis=0)]
    h.series["dp_bytes"] = [int(v) for v in np.sum([r["dp_bytes"] for r in ranks], axis=0)]
    for r in ranks:
        tag = f"stage{r['stage']}" + (f"/replica{r['replica']}" if cfg.replicas > 1 else "")
        for key in ("compute", "idle", "send", "act_peak", "stash_peak", "staleness", "fwd_sum",
                    "bwd_sum", "timeline", "avg_subset_sum", "avg_merged", "avg_wait", "params",
                    "dp_bytes", "ends"):
            if key in r:
                h.series[f"{key}/{tag}"] = r[key]
        h.series[f"utilisation/{tag}"] = float(sum(r["compute"]) / h.wall_s)
    return h


def _run_all(ctx, configs, checkpoint=None):
    return [run_rank(ctx, c, checkpoint) for c in configs]


def run_raw(configs: list[PipelineConfig], *, _checkpoint: dict | None = None,
            **launch_kw) -> list[list[dict]]:
    """Launch ``configs`` (one mesh size) once; per config, every rank's raw results
    (including its stage's final ``weights``), by rank. A failure raises
    :class:`~lab.run.RunFailed` (its history: the first config's steps that completed)."""
    configs = list(configs)
    if not configs or not all(isinstance(c, PipelineConfig) for c in configs):
        raise TypeError("configs must be a non-empty list of PipelineConfig")
    world = configs[0].world_size
    for c in configs:
        c.check(world)
    launch_kw.setdefault("timeout", 60 + 60 * len(configs))
    launch_kw.setdefault("device", "cpu")
    links = {c.link for c in configs}
    if len(links) > 1:
        raise ValueError("configs of one launch must share one link ('model' or 'kernel'), got "
                         f"{sorted(links)}: run them in separate calls")
    if links == {"kernel"}:  # the NICs start at the first config's rate; each run reshapes its own
        launch_kw.setdefault("link", "kernel")
        launch_kw.setdefault("network", Network.parse(configs[0].network))
    try:
        results = launch(_run_all, world, configs, _checkpoint, **launch_kw)
    except LaunchError as err:
        raise RunFailed(err, partial(configs[0], err.records) if len(configs) == 1 else None) \
            from err
    return [[r[i] for r in results] for i in range(len(configs))]


def train_many(configs: list[PipelineConfig], **launch_kw) -> list[History]:
    """Run ``configs`` (one mesh size) in one launch; returns one History each."""
    configs = list(configs)
    return [merge(c, ranks) for c, ranks in zip(configs, run_raw(configs, **launch_kw))]


def train(config: PipelineConfig, *, checkpoint_every: int = 0, checkpoint_dir=None,
          resume=None, **launch_kw) -> History:
    """Run one pipeline configuration in its own launch and return its History
    (:func:`train_many` with one config; ``launch_kw`` go to ``lab.launch``).

    ``checkpoint_every=N`` writes a checkpoint into ``checkpoint_dir`` after every N updates;
    ``resume=DIR`` continues from the newest one in DIR (same config, else a ValueError naming
    the fields): the run ends with the same weights, bitwise on the CPU, as one never stopped.
    Flushing schedules (GPipe, 1F1B) only. A failure raises :class:`~lab.run.RunFailed` with
    the steps every rank completed."""
    plan = None
    if isinstance(config, PipelineConfig):  # else run_raw names the bad argument
        plan = checkpoint_plan(checkpoint_every, checkpoint_dir, resume, config.to_dict(),
                               config.world_size, "pipeline")
        if plan is not None:
            rank_state.check(config)
    return merge(config, run_raw([config], _checkpoint=plan, **launch_kw)[0])
