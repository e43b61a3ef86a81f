"""What every kind of run builds on each rank from a ``TrainConfig``: the dataset, model,
optimizer and aggregator (:func:`~lab.train.build`), the whole :class:`lab.engine.Engine`
with its straggler, attack and averaging scheme (:func:`engine`), and the held-out evaluation
(:func:`~lab.train.evaluate`). The data-parallel loop (:mod:`lab.train`), the parameter server
(``lab.sync.server``) and Hogwild use them, so they live below all three.
"""
from __future__ import annotations

import torch

from .. import aggregate, attack as attacks, averaging, compress, data as data_mod, models
from ..comm import Collective
from ..engine import Engine
from ..runtime import RankContext
from .config import TrainConfig
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


def engine(ctx: RankContext, cfg: TrainConfig, comm: Collective) -> Engine:
    """Everything one rank needs for ``cfg``: model, optimizer, aggregator, straggler, attack,
    averaging (the named extension points of the loop)."""
    data, model, params, opt, agg = build(cfg, comm, ctx.device)
    e = Engine(cfg, ctx.rank, ctx.world_size, ctx.device, comm, data, model, params, opt, agg,
               models.loss_fn(data.task),
               straggler=Straggler(cfg.slow_ranks.get(ctx.rank, 1.0), cfg.jitter, cfg.seed,
                                   ctx.rank, cfg.device_s))
    bad = ctx.rank >= ctx.world_size - cfg.byzantine
    e.attack = attacks.make(cfg.attack, e, bad, **cfg.attack_kw)
    e.averaging = averaging.make(cfg.averaging, e, **cfg.averaging_kw)
    return e
