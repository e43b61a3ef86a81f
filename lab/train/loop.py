"""The data-parallel worker loop, and ``train``/``train_many`` that launch it.

Each step, by default (schedule ``sync``): forward and backward on this rank's slice of the
global batch (timed as compute), then the aggregator averages the gradients over ranks through
``lab.comm`` (timed; the ledger splits it into time in collectives and time in the codec), then
the optimizer steps. Every replica applies the same update, so the models stay identical
(synchronous data parallelism). The named extension points (:mod:`lab.engine`) change when
gradients move (schedule), what is summed (aggregator), what follows the step (averaging),
who talks to whom (sync mode), and which ranks are slow or Byzantine.
"""
from __future__ import annotations

import sys
import time

from .. import schedule
from .. import sync as sync_modes
from ..comm import Collective, CommLedger
from ..run import checkpoint as checkpoint_mod
from ..run.build import build, engine, evaluate
from ..run.config import TrainConfig
from ..run.failed import RunFailed
from ..run.history import History
from ..run.stream import extend
from ..runtime import LaunchError, RankContext, launch
from . import guard as divergence
from . import resume as rank_state
from .resume import Keeper


def train_rank(ctx: RankContext, cfg: TrainConfig, progress_desc: str = "", *,
               stream=None, checkpoint: dict | None = None) -> History:
    """Run one config on this rank; returns this rank's History. ``stream``: a tag under which
    rank 0 streams its history to the caller step by step (a failed run keeps it);
    ``checkpoint``: ``{"every", "dir", "resume"}`` (see :func:`train`)."""
    mode = sync_modes.REGISTRY.get(cfg.sync)
    if mode.own_loop:  # a parameter server and its workers: the mode's own loop
        if checkpoint is None:
            return mode.run(ctx, cfg, progress_desc)
        return mode.run(ctx, cfg, progress_desc, checkpoint=checkpoint)  # resumable (checked)
    comm = Collective(ledger=CommLedger(), network=cfg.network_at(0))
    e = engine(ctx, cfg, comm)
    # a non-finite gradient named with its rank before it is summed (reads only: a run that
    # does not diverge computes the same numbers)
    guard = divergence.install(e, cfg.schedule) if cfg.stop_on_divergence else None
    sched = schedule.make(cfg.schedule, e, **cfg.schedule_kw)
    keep = Keeper(ctx, cfg, e, sched, stream, checkpoint)  # history (resumed?), checkpoints
    h = keep.history
    start = time.perf_counter()
    # advanced by each step's records: an overlapping schedule's thread may record between
    # steps, and no record may be lost (a resumed run's carried records go to its first step)
    mark = comm.ledger.mark() - keep.carried
    try:
        for step in range(keep.first, cfg.steps):
            comm.network = cfg.network_at(step)
            comm.ledger.step = step
            if guard is not None:
                guard.step = step
            x, y = e.data.batch(step, cfg.batch_size, ctx.rank, ctx.world_size, cfg.seed)
            x, y = e.attack.on_batch(x.to(ctx.device), y.to(ctx.device), step)
            r = sched.step(step, x, y)
            info = dict(r.info)
            info.update(e.averaging.after_step(step))
            info.update(e.aggregator.info())
            recs = comm.ledger.since(mark)
            mark += len(recs)
            info["traffic"] = traffic(recs)
            wire = sum(rec.seconds for rec in recs)
            h.loss.append(r.loss)
            h.bytes.append(sum(rec.bytes for rec in recs))
            h.recv_bytes.append(sum(rec.recv_bytes for rec in recs))
            h.wire_sent.append(sum(rec.wire_sent for rec in recs))
            h.wire_recv.append(sum(rec.wire_recv for rec in recs))
            h.compute_s.append(r.compute_s)
            h.comm_s.append(wire if r.comm_s is None else r.comm_s)
            h.codec_s.append(max(0.0, r.exchange_s - wire) if r.codec_s is None else r.codec_s)
            h.modeled_comm_s.append(sum(rec.modeled for rec in recs))
            if info:
                h.record(info)
            done = step + 1
            if done == cfg.steps:
                sched.close()
                e.averaging.finish()
            if (cfg.eval_every and done % cfg.eval_every == 0) or done == cfg.steps:
                if ctx.rank == 0:
                    tl, ta = evaluate(e.model, e.data, ctx.device)
                    h.eval_step.append(done)
                    h.test_loss.append(tl)
                    h.test_acc.append(ta)
            keep.after_step(done, comm.ledger, mark, time.perf_counter() - start)
            if guard is not None:   # the step is kept (streamed, checkpointed) before it stops
                divergence.check_loss(r.loss, h.loss[0], step, ctx.rank, cfg.lr)
            ctx.progress(done, cfg.steps, progress_desc or cfg.name)
    finally:
        sched.close()
    h.wall_s = keep.past_wall + time.perf_counter() - start
    h.rank_bytes = [keep.past_bytes + comm.ledger.total_bytes()]
    return h


def traffic(records) -> dict:
    """``{op: [calls, bytes]}`` of ledger records: enough to price them with the alpha-beta model
    on any link (each op's time is linear in its calls and its bytes), as the method
    advisor does (:mod:`lab.advise`)."""
    out: dict = {}
    for rec in records:
        calls_bytes = out.setdefault(rec.op, [0, 0])
        calls_bytes[0] += 1
        calls_bytes[1] += rec.bytes
    return out


def train_configs(ctx: RankContext, configs: list[TrainConfig], checkpoint: dict | None = None,
                  announce: str | None = None) -> list[History]:
    """Worker: run several configs one after another in the same process group; rank 0
    streams each one's history, tagged with its index. ``announce``: rank 0 also writes
    ``"ANNOUNCE i/n NAME: T s"`` to stderr as each config is done (the launcher forwards a
    rank's stderr as it comes)."""
    out = []
    for i, c in enumerate(configs):
        t0 = time.perf_counter()
        out.append(train_rank(ctx, c, f"{i + 1}/{len(configs)} {c.name}", stream=i,
                              checkpoint=checkpoint))
        if announce and ctx.rank == 0:
            print(f"{announce} {i + 1}/{len(configs)} {c.name}: {time.perf_counter() - t0:.1f} s",
                  file=sys.stderr, flush=True)
    return out


def _merge(per_rank: list[History]) -> History:
    """Rank 0's history with the loss averaged over ranks and every rank's byte total."""
    h = per_rank[0]
    h.loss = [sum(r.loss[i] for r in per_rank) / len(per_rank) for i in range(len(h.loss))]
    h.rank_bytes = [r.rank_bytes[0] for r in per_rank]
    return h


def _failed(err: LaunchError, configs: list[TrainConfig], workers: int) -> RunFailed:
    """The error, with the history rank 0 streamed for the config that was running."""
    if not err.records:
        return RunFailed(err, None)
    i = err.records[-1][1][0]
    h = History(configs[i].to_dict(), workers)
    for _, (tag, delta) in err.records:
        if tag == i:
            extend(h, delta)
    return RunFailed(err, h if h.steps else None)


def train_many(configs: list[TrainConfig], workers: int, *, _checkpoint: dict | None = None,
               announce: str | None = None, **launch_kw) -> list[History]:
    """Run ``configs`` on ``workers`` ranks in a single launch (process start is paid once);
    ``announce``: a line on stderr as each config is done (:func:`~lab.train.train_configs`).
    If a rank raises, dies or hangs: :class:`~lab.run.RunFailed` with the history of the
    config that was running, up to its last completed step."""
    configs = list(configs)
    if not configs or not all(isinstance(c, TrainConfig) for c in configs):
        raise TypeError("configs must be a non-empty list of TrainConfig")
    for c in configs:
        c.check_workers(workers)
    launch_kw.setdefault("timeout", 60 + 30 * len(configs))
    launch_kw.setdefault("device", "cpu")
    links = {c.link for c in configs}
    if len(links) > 1:
        raise ValueError("configs of one launch must share one link ('model' or 'kernel'), got "
                         f"{sorted(links)}: run them in separate calls")
    if links == {"kernel"}:  # the NICs start at the first config's rate; each run reshapes them
        launch_kw.setdefault("link", "kernel")
        launch_kw.setdefault("network", configs[0].network_at(0))
    try:
        results = launch(train_configs, workers, configs, _checkpoint, announce, **launch_kw)
    except LaunchError as err:
        raise _failed(err, configs, workers) from err
    return [_merge([r[i] for r in results]) for i in range(len(configs))]


def train(config: TrainConfig, workers: int = 1, *, checkpoint_every: int = 0,
          checkpoint_dir=None, resume=None, **launch_kw) -> History:
    """Run one config on ``workers`` real processes; returns the merged History.

    ``checkpoint_every=N`` writes a checkpoint into ``checkpoint_dir`` every N completed steps
    (:mod:`lab.run.checkpoint`); ``resume=DIR`` continues from the newest checkpoint in DIR
    (same config and workers, else a ValueError naming what differs) and returns one History
    of all the steps. Resumed, a run ends with the same parameters, bitwise on the CPU, as if
    it had never stopped. A failure raises :class:`~lab.run.RunFailed`."""
    plan = None
    if isinstance(config, TrainConfig):  # else train_many names the bad argument
        plan = checkpoint_mod.plan(checkpoint_every, checkpoint_dir, resume, config.to_dict(),
                                   workers, "train")
        if plan is not None:
            rank_state.check(config)
    return train_many([config], workers, _checkpoint=plan, **launch_kw)[0]
