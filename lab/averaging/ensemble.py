"""Ensembles trained on shards in parallel, then distilled into one model.

Each rank trains its own member, from its own initialisation (seed + rank), on its own
disjoint shard of the training set, with no communication at all (Fernandez-Delgado, Cernadas,
Barro, Amorim, "Do we need hundreds of classifiers to solve real world classification
problems?", JMLR 2014, found ensembles among the strongest classifiers). The ensemble predicts
with the mean of the members' logits. Every rank then computes its member's logits on the
whole training set (the transfer set) and on the test set, and one allgather brings all of
them to every rank (counted in the ledger).

Distillation (Ba, Caruana, "Do deep nets really need to be deep?", NeurIPS 2014, Section 2.2):
a student of the members' architecture is trained on rank 0 to regress the ensemble's logits
with a squared error, on the transfer set. The student is one model: it costs one member's
inference, and the question is how much of the ensemble's accuracy it keeps.
"""
from __future__ import annotations

import dataclasses

import torch

from .. import data as data_mod, models
from ..comm import Collective, CommLedger
from ..runtime import RankContext, launch
from ..run.config import TrainConfig


def shard(data, rank: int, world_size: int):
    """This rank's disjoint, contiguous share of the training set."""
    n = len(data.x_train) // world_size
    sl = slice(rank * n, (rank + 1) * n)
    return dataclasses.replace(data, x_train=data.x_train[sl], y_train=data.y_train[sl])


def optimizer(cfg: TrainConfig, params):
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)


def fit(model, cfg: TrainConfig, steps: int, batches, loss_fn) -> list[float]:
    """Plain SGD on ``batches(step) -> (x, target)``; returns the losses."""
    opt, losses = optimizer(cfg, list(model.parameters())), []
    for step in range(steps):
        x, t = batches(step)
        opt.zero_grad()
        loss = loss_fn(model(x), t)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"ensemble: loss is {loss.item()} at step {step}")
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def accuracy(logits: torch.Tensor, y: torch.Tensor) -> float:
    return float((logits.argmax(-1) == y).float().mean())


def check(cfg: TrainConfig, workers: int, distill_steps: int) -> None:
    cfg.check_workers(workers)
    if cfg.data not in ("digits", "blobs"):
        raise ValueError(f"ensemble needs a classification dataset (digits, blobs), "
                         f"got data={cfg.data!r}")
    if isinstance(distill_steps, bool) or not isinstance(distill_steps, int) or distill_steps < 0:
        raise ValueError(f"distill_steps must be an int >= 0, got {distill_steps!r}")


def ensemble_rank(ctx: RankContext, cfg: TrainConfig, distill_steps: int) -> dict:
    """Worker: train member ``ctx.rank`` on its shard; gather logits; rank 0 distils."""
    comm = Collective(ledger=CommLedger())
    data = data_mod.load(cfg.data, seed=cfg.seed, **cfg.data_kw)
    mine = shard(data, ctx.rank, ctx.world_size)
    per_rank = cfg.batch_size // ctx.world_size
    member = models.make(cfg.model, data, seed=cfg.seed + ctx.rank, **cfg.model_kw)
    ce = models.loss_fn("classify")
    fit(member, cfg, cfg.steps,
        lambda s: mine.batch(s, per_rank, 0, 1, cfg.seed + 7 * ctx.rank), ce)
    x_test, y_test = data.test_set()
    member.eval()
    with torch.no_grad():
        own = torch.cat([member(data.x_train), member(x_test)])
    logits = torch.stack(comm.allgather(own, tag="logits", same_size=True))  # (members, N, C)
    n_train = len(data.x_train)
    mean_logits = logits.mean(dim=0)
    out = {"member_acc": [accuracy(l[n_train:], y_test) for l in logits],
           "ensemble_acc": accuracy(mean_logits[n_train:], y_test),
           "bytes": comm.ledger.total_bytes(), "student_acc": None, "student_loss": []}
    if ctx.rank == 0 and distill_steps:
        student = models.make(cfg.model, data, seed=cfg.seed + 10_000, **cfg.model_kw)
        targets = mean_logits[:n_train]
        g = torch.Generator().manual_seed(cfg.seed)

        def batches(step):
            idx = torch.randint(0, n_train, (cfg.batch_size,), generator=g)
            return data.x_train[idx], targets[idx]
        out["student_loss"] = fit(student, cfg, distill_steps, batches, torch.nn.functional.mse_loss)
        student.eval()
        with torch.no_grad():
            out["student_acc"] = accuracy(student(x_test), y_test)
    return out


def train_ensemble(cfg: TrainConfig, workers: int, distill_steps: int = 200, **launch_kw) -> dict:
    """Train ``workers`` members on disjoint shards in parallel processes, distil them into one
    student; returns member, ensemble and student test accuracies and the bytes per rank."""
    check(cfg, workers, distill_steps)
    launch_kw.setdefault("timeout", 120)
    launch_kw.setdefault("device", "cpu")
    runs = launch(ensemble_rank, workers, cfg, distill_steps, **launch_kw)
    result = dict(runs[0])
    result["rank_bytes"] = [r["bytes"] for r in runs]
    return result
