"""The pipeline of one replica in one process: every stage's :class:`StageWorker`, optimizer,
clipping and schedule exactly as :func:`lab.pipeline.loop.run_rank` drives them, with the
messages between neighbours handed over in memory instead of over ``lab.comm``.

What a stage computes depends only on the order of its own actions and on the tensors its
neighbours hand it, never on when they arrive; so running every stage's action list (its
schedule: GPipe, 1F1B, or asynchronous 1F1B with or without weight stashing, PipeDream,
Narayanan et al., SOSP 2019, Sec. 3.3) in any order that respects the messages gives the
multi-process runner's losses and weights to the bit (``tests/test_pipeline_emulate.py``
checks it). Each delayed gradient is the runner's: stage ``s`` of ``p`` applies it
``min(k, p - 1 - s)`` updates late, evaluated at the current weights (``async``) or at the
stashed ones its forward pass used (``async-stash``; with ``recompute``, the authors' weight
stash and recompute, AsyncPP ``main_with_runtime.py``: ``num_versions = num_warmup_minibatches
+ 1``, ``load_old_params()`` before ``run_backward()``).

It is the substrate for long optimisation runs (8 stages, 1,000 updates in seconds on one
core); it has no clock and no bytes: time and traffic are the runner's (evidence ``emulator``).
One replica only (no averaging across replicas). The result adds what the runner does not
record: the held-out loss of the final model (the chained stages on the data's test split).
"""
from __future__ import annotations

import collections

import numpy as np
import torch

from .. import data as data_mod, models
from ..run.straggler import Straggler
from .config import PipelineConfig
from .loop import SCHEDULES
from .optim import make_optimizer, step_lr
from .stages import split
from .worker import StageWorker


class _Ledger:
    step = 0


class _Port:
    """A stage's receiving end: the neighbour's tensors, first in first out per (source, tag)."""

    def __init__(self, boxes, rank):
        self.boxes, self.rank = boxes, rank

    def recv(self, buf, src, tag):
        buf.copy_(self.boxes[(src, self.rank, tag)].popleft())


class _Link:
    """What :class:`StageWorker` asks of a :class:`~lab.pipeline.mesh.Mesh`, in memory."""

    def __init__(self, stage, stages, boxes):
        self.first, self.last = stage == 0, stage == stages - 1
        self.prev, self.next, self.rank = stage - 1, stage + 1, stage
        self.ledger, self.pp, self.boxes = _Ledger(), _Port(boxes, stage), boxes

    def send(self, t, dst, tag, step):
        self.boxes[(self.rank, dst, tag)].append(t.detach().contiguous().clone())


def heldout_loss(pieces, data, limit: int = 256) -> float:
    """The loss of the chained ``pieces`` on the first ``limit`` held-out examples."""
    x, y = data.test_set(limit)
    with torch.no_grad():
        for p in pieces:
            x = p(x)
        return float(models.loss_fn(data.task)(x, y))


def emulate(cfg: PipelineConfig, heldout: int = 256) -> dict:
    """``cfg`` (one replica) run in this process: ``loss`` per step (the last stage's mean over
    the step's micro-batches, as the runner's History has it), ``heldout`` (the final model's
    held-out loss on ``heldout`` examples), each stage's final ``weights`` and ``staleness``."""
    if not isinstance(cfg, PipelineConfig):
        raise TypeError(f"cfg must be a PipelineConfig, got {type(cfg).__name__}")
    if cfg.replicas != 1 or cfg.dp != "none":
        raise ValueError(f"the emulator runs one replica with dp='none', got replicas="
                         f"{cfg.replicas}, dp={cfg.dp!r}: use lab.pipeline.train")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the runner's ranks run one thread each: the same kernels
    try:
        return _run(cfg, heldout)
    finally:
        torch.set_num_threads(threads)


def _run(cfg, heldout):
    S, m = cfg.stages, cfg.microbatches
    data = data_mod.load(cfg.data, seed=cfg.seed, **cfg.data_kw)
    pieces = split(models.make(cfg.model, data, seed=cfg.seed, **cfg.model_kw), S)
    asynchronous = cfg.schedule.startswith("async")
    per = cfg.batch_size // m
    with torch.no_grad():
        shapes, x = [], data.batch(0, per)[0]
        for p in pieces:
            x = p(x)
            shapes.append(tuple(x.shape))
    boxes = collections.defaultdict(collections.deque)
    workers, opts, params = [], [], []
    for s, module in enumerate(pieces):
        params.append(list(module.parameters()))
        opts.append(make_optimizer(cfg, params[s]))
        workers.append(StageWorker(module, _Link(s, S, boxes), models.loss_fn(data.task),
                                   asynchronous, cfg.schedule == "async-stash", 1.0 if asynchronous
                                   else 1.0 / m, shapes[s - 1] if s else None, shapes[s],
                                   Straggler(1.0, 0.0, cfg.seed, s), 0.0, recompute=cfg.recompute))
    batches: dict[int, tuple] = {}

    def micro(k):
        t, i = divmod(k, m)
        if t not in batches:  # every stage reads the same step's batch: keep it until all have
            batches[t] = data.batch(t, cfg.batch_size, rank=0, world_size=1, seed=cfg.seed)
        x, y = batches[t]
        return x[i * per:(i + 1) * per], y[i * per:(i + 1) * per]

    total = cfg.steps * (m if asynchronous else 1)

    def act(s, kind, k):
        w = workers[s]
        step = k if kind == "U" and not asynchronous else k // m
        if kind == "F":
            w.forward(k, step, *micro(k))
        elif kind == "B":
            w.backward(k, step)
        else:  # the runner's update(), without averaging
            step_lr(cfg, opts[s], w.version, total, S - 1 - s)
            if cfg.clip is not None:
                torch.nn.utils.clip_grad_norm_(params[s], cfg.clip)
            opts[s].step()
            opts[s].zero_grad(set_to_none=True)
            w.version += 1

    def ready(s, kind):
        if kind == "F" and s > 0:
            return bool(boxes[(s - 1, s, "act")])
        if kind == "B" and s < S - 1:
            return bool(boxes[(s + 1, s, "grad")])
        return True

    todo = [collections.deque(SCHEDULES[cfg.schedule](s, S, m, cfg.steps)) for s in range(S)]
    while any(todo):
        moved = False
        for s in range(S):  # each stage runs as far as its inputs allow
            while todo[s] and ready(s, todo[s][0][0]):
                act(s, *todo[s].popleft())
                moved = True
        if not moved:
            raise RuntimeError(f"the schedule {cfg.schedule!r} deadlocked in the emulator")
        done = min(w.version for w in workers)  # batches every stage is past
        for t in [t for t in batches if (t + 1) * m <= done * (1 if asynchronous else m)]:
            del batches[t]
    last = workers[-1]
    for module in pieces:
        module.eval()
    return {"loss": [float(np.mean(last.losses[t])) for t in range(cfg.steps)],
            "heldout": heldout_loss(pieces, data, heldout),
            "weights": [torch.nn.utils.parameters_to_vector(p).detach().clone() for p in params],
            "staleness": [w.log["staleness"] for w in workers], "updates": total}
