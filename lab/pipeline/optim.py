"""The optimizer of one stage, from a :class:`PipelineConfig`.

``adamw`` and ``nadamw`` decay the weights decoupled from the gradient (Loshchilov and Hutter,
ICLR 2019), as the AsyncPP runs do (authors' ``optim/nadamw.py``, ``optim/adamw.py``: torch's
NAdam/AdamW with ``betas=(momentum, 0.999)``, ``weight_decay`` 0.01, and ``clip_grad`` 10 on
each stage's gradient norm). ``beta1`` sets the first-moment coefficient of the Adam family,
so Adam(W) and NAdam(W) can be compared at the *same* momentum: what remains between them is
Nesterov's look-ahead alone. ``async-nesterov`` is the asynchronous schedule with NAdam(W) at
``schedule_kw['momentum']`` (0.99), the authors' configuration. ``mu_schedule`` picks every
NAdam's ``mu_t``: torch's warm-up (the authors') or ``beta1`` from the first update
or torch's squeezed into the run (:mod:`lab.pipeline.nesterov`).
"""
from __future__ import annotations

import torch

from .lr import scheduled_lr
from .nesterov import corrected_lr, lookahead_optimizer, nadam


def updates(cfg) -> int:
    """Updates a stage applies in the run: one per micro-batch asynchronously, else one a step."""
    return cfg.steps * (cfg.microbatches if cfg.schedule.startswith("async") else 1)


def make_optimizer(cfg, params) -> torch.optim.Optimizer:
    wd = cfg.weight_decay
    if cfg.schedule == "async-nesterov":
        return lookahead_optimizer(params, cfg.lr, momentum=cfg.schedule_kw.get("momentum", 0.99),
                                   weight_decay=wd, mu_schedule=cfg.mu_schedule, updates=updates(cfg))
    betas = (0.9 if cfg.beta1 is None else cfg.beta1, 0.999)
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=cfg.lr, betas=betas, weight_decay=wd)
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=cfg.lr, betas=betas, weight_decay=wd)
    if cfg.optimizer in ("nadam", "nadamw"):
        return nadam(params, cfg.lr, betas[0], wd, cfg.optimizer == "nadamw", cfg.mu_schedule,
                     updates(cfg))
    return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=wd)


def step_lr(cfg, opt, update: int, total: int, delay: int) -> None:
    """Set the learning rate of update ``update`` of ``total`` (warm-up and cosine, then
    PipeMare's correction on a stage of gradient delay ``delay`` if asked)."""
    lr = scheduled_lr(cfg.lr, update, total, cfg.lr_schedule, cfg.warmup)
    warm = cfg.schedule_kw.get("lr_correction", 0) if cfg.schedule == "async-nesterov" else 0
    if warm:
        lr = corrected_lr(lr, delay, update, warm)
    for g in opt.param_groups:
        g["lr"] = lr
