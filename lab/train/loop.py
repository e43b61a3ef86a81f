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

import time

import torch

from .. import aggregate, attack as attacks, averaging, compress, data as data_mod, models, schedule
from .. import sync as sync_modes
from ..comm import Collective, CommLedger
from ..engine import Engine
from ..runtime import RankContext, launch
from .config import TrainConfig
from .history import History
from .straggler import Straggler


def build(cfg: TrainConfig, comm: Collective, device: torch.device):
    """Dataset, model, optimizer and aggregator for ``cfg`` on this rank."""
    data = data_mod.load(cfg.data, seed=cfg.seed, **cfg.data_kw)
    model = models.make(cfg.model, data, seed=cfg.seed, **cfg.model_kw).to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    if cfg.optimizer == "adam":
        opt = torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    else:
        opt = torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum,
                              weight_decay=cfg.weight_decay)
    codec = compress.make(cfg.compressor, **cfg.compressor_kw)
    if cfg.error_feedback:
        codec = compress.ErrorFeedback(codec)
    name = cfg.aggregator
    if name == "auto":
        name = "allreduce" if cfg.compressor == "none" and not cfg.error_feedback else "compressed"
    kw = dict(cfg.aggregator_kw)
    if cfg.layerwise is not None:
        kw["layerwise"] = cfg.layerwise
    if aggregate.REGISTRY.get(name).uses_compressor:
        kw["compressor"] = codec
    agg = aggregate.make(name, comm=comm, **kw)
    return data, model, params, opt, agg


@torch.no_grad()
def evaluate(model, data, device) -> tuple[float, float]:
    """(loss, accuracy) of ``model`` on the whole test set of ``data``, on ``device``."""
    model.eval()
    x, y = data.test_set()
    out = model(x.to(device))
    y = y.to(device)
    loss = float(models.loss_fn(data.task)(out, y))
    acc = float((out.argmax(-1) == y).float().mean()) if data.task != "regress" else float("nan")
    model.train()
    return loss, acc


def train_rank(ctx: RankContext, cfg: TrainConfig, progress_desc: str = "") -> History:
    """Run one config on this rank; returns this rank's History."""
    mode = sync_modes.REGISTRY.get(cfg.sync)
    if mode.own_loop:  # a parameter server and its workers: the mode's own loop
        return mode.run(ctx, cfg, progress_desc)
    comm = Collective(ledger=CommLedger(), network=cfg.network_at(0))
    e = engine(ctx, cfg, comm)
    h = History(cfg.to_dict(), ctx.world_size)
    sched = schedule.make(cfg.schedule, e, **cfg.schedule_kw)
    start = time.perf_counter()
    mark = comm.ledger.mark()  # advanced by each step's records: an overlapping schedule's
    try:                       # thread may record between steps, and no record may be lost
        for step in range(cfg.steps):
            comm.network = cfg.network_at(step)
            comm.ledger.step = step
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
            ctx.progress(done, cfg.steps, progress_desc or cfg.name)
    finally:
        sched.close()
    h.wall_s = time.perf_counter() - start
    h.rank_bytes = [comm.ledger.total_bytes()]
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


def engine(ctx: RankContext, cfg: TrainConfig, comm: Collective) -> Engine:
    """Everything one rank needs for ``cfg``: model, optimizer, aggregator, straggler, attack,
    averaging (the named extension points of the loop)."""
    data, model, params, opt, agg = build(cfg, comm, ctx.device)
    e = Engine(cfg, ctx.rank, ctx.world_size, ctx.device, comm, data, model, params, opt, agg,
               models.loss_fn(data.task),
               straggler=Straggler(cfg.slow_ranks.get(ctx.rank, 1.0), cfg.jitter, cfg.seed,
                                   ctx.rank))
    bad = ctx.rank >= ctx.world_size - cfg.byzantine
    e.attack = attacks.make(cfg.attack, e, bad, **cfg.attack_kw)
    e.averaging = averaging.make(cfg.averaging, e, **cfg.averaging_kw)
    return e


def train_configs(ctx: RankContext, configs: list[TrainConfig]) -> list[History]:
    """Worker: run several configs one after another in the same process group."""
    return [train_rank(ctx, c, f"{i + 1}/{len(configs)} {c.name}") for i, c in enumerate(configs)]


def _merge(per_rank: list[History]) -> History:
    """Rank 0's history with the loss averaged over ranks and every rank's byte total."""
    h = per_rank[0]
    h.loss = [sum(r.loss[i] for r in per_rank) / len(per_rank) for i in range(len(h.loss))]
    h.rank_bytes = [r.rank_bytes[0] for r in per_rank]
    return h


def train_many(configs: list[TrainConfig], workers: int, **launch_kw) -> list[History]:
    """Run ``configs`` on ``workers`` ranks in a single launch (process start is paid once)."""
    configs = list(configs)
    if not configs or not all(isinstance(c, TrainConfig) for c in configs):
        raise TypeError("configs must be a non-empty list of TrainConfig")
    for c in configs:
        c.check_workers(workers)
    launch_kw.setdefault("timeout", 60 + 30 * len(configs))
    launch_kw.setdefault("device", "cpu")
    results = launch(train_configs, workers, configs, **launch_kw)
    return [_merge([r[i] for r in results]) for i in range(len(configs))]


def train(config: TrainConfig, workers: int = 1, **launch_kw) -> History:
    """Run one config on ``workers`` real processes; returns the merged History."""
    return train_many([config], workers, **launch_kw)[0]
