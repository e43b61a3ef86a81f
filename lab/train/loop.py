"""The data-parallel worker loop, and ``train``/``train_many`` that launch it.

Each step: forward and backward on this rank's slice of the global batch (timed as compute),
then the aggregator averages the gradients over ranks through ``lab.comm`` (timed; the ledger
splits it into time in collectives and time in the codec), then the optimizer steps. Every
replica applies the same update, so the models stay identical (synchronous data parallelism).
"""
from __future__ import annotations

import time

import torch

from .. import aggregate, compress, data as data_mod, models
from ..comm import Collective, CommLedger
from ..runtime import RankContext, launch
from .config import TrainConfig
from .history import History


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
    comm = Collective(ledger=CommLedger(), network=cfg.net)
    data, model, params, opt, agg = build(cfg, comm, ctx.device)
    lossf = models.loss_fn(data.task)
    h = History(cfg.to_dict(), ctx.world_size)
    start = time.perf_counter()
    for step in range(cfg.steps):
        x, y = data.batch(step, cfg.batch_size, ctx.rank, ctx.world_size, cfg.seed)
        x, y = x.to(ctx.device), y.to(ctx.device)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        loss = lossf(model(x), y)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"step {step}: loss is {loss.item()} on rank {ctx.rank} "
                                     f"(lr={cfg.lr} too large?)")
        loss.backward()
        _sync(ctx.device)
        t1 = time.perf_counter()
        mark = comm.ledger.mark()
        comm.ledger.step = step
        grads = agg.aggregate([p.grad for p in params], step)
        _sync(ctx.device)
        t2 = time.perf_counter()
        for p, g in zip(params, grads):
            p.grad.copy_(g)
        opt.step()
        recs = comm.ledger.since(mark)
        wire = sum(r.seconds for r in recs)
        h.loss.append(float(loss.detach()))
        h.bytes.append(sum(r.bytes for r in recs))
        h.recv_bytes.append(sum(r.recv_bytes for r in recs))
        h.compute_s.append(t1 - t0)
        h.comm_s.append(wire)
        h.codec_s.append(max(0.0, (t2 - t1) - wire))
        h.modeled_comm_s.append(sum(r.modeled for r in recs))
        done = step + 1
        if (cfg.eval_every and done % cfg.eval_every == 0) or done == cfg.steps:
            if ctx.rank == 0:
                tl, ta = evaluate(model, data, ctx.device)
                h.eval_step.append(done)
                h.test_loss.append(tl)
                h.test_acc.append(ta)
        ctx.progress(done, cfg.steps, progress_desc or cfg.name)
    h.wall_s = time.perf_counter() - start
    h.rank_bytes = [comm.ledger.total_bytes()]
    return h


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


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
