"""The named extension points of the one training loop (DESIGN.md, "Training engine").

:class:`Engine` is what every scheme receives: the model, optimizer, aggregator and collective
of this rank, plus the per-rank straggler and attack. Each extension point is a registry of
small classes with a default that does nothing special:

- ``lab.schedule``: *when* gradients move (``sync``: after backward, whole model);
- ``lab.aggregate``: *what* is summed and how (dense, compressed, PowerSGD, robust rules...);
- ``lab.averaging``: what happens *after* the optimizer step (``none``; local SGD, EASGD...);
- ``lab.sync``: *who* talks to whom (``allreduce`` among peers; parameter-server modes run their
  own loop over the same pieces);
- ``lab.attack``: what a Byzantine rank does to what it sends (``none``);
- stragglers: :class:`lab.train.straggler.Straggler`, a per-rank compute slowdown.

With ``TrainConfig.stop_on_divergence`` (the default) the loop wraps ``attack`` so that what a
rank hands to the aggregator is checked for NaN/Inf before it is summed, and stops a run whose
loss grew 1,000-fold (:mod:`lab.train.guard`); the checks only read.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from .comm import Collective


@dataclass
class Engine:
    """What every scheme receives: this rank's config, rank and world size, device,
    collective, data, model, trainable parameters, optimizer, aggregator and loss, plus its
    straggler, attack and averaging scheme (``None`` where the run has none)."""

    cfg: Any                      # the TrainConfig
    rank: int
    world_size: int
    device: torch.device
    comm: Collective
    data: Any                     # lab.data.Dataset
    model: torch.nn.Module
    params: list                  # trainable parameters, in model.parameters() order
    optimizer: torch.optim.Optimizer
    aggregator: Any               # lab.aggregate.Aggregator
    loss_fn: Callable
    straggler: Any = None         # lab.train.straggler.Straggler
    attack: Any = None            # lab.attack.Attack (acts only on Byzantine ranks)
    averaging: Any = None         # lab.averaging.Averaging
    extra: dict = field(default_factory=dict)  # scheme-private state shared across points


@dataclass
class StepResult:
    """What one step measured. ``comm_s``/``codec_s`` left as None are computed by the loop
    from the ledger (time in collectives; the rest of the exchange is codec time). A schedule
    that overlaps communication with compute sets them itself: ``comm_s`` is then the
    *exposed* (non-overlapped) communication, so compute + codec + comm is the step's wall time.
    """

    loss: float
    compute_s: float
    exchange_s: float
    comm_s: float | None = None
    codec_s: float | None = None
    info: dict = field(default_factory=dict)  # per-step series for History.series
