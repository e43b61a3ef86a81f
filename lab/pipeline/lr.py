"""The learning-rate schedule of the AsyncPP runs (authors' ``main_with_runtime.py``,
``adjust_learning_rate`` with ``--lr_warmup --lr_policy cosine``): a linear warm-up from
``lr_init`` to ``lr`` over the first ``warmup`` updates, then a cosine decay to
``min_ratio x lr`` (theirs: 0.1) at the last update. Counted in updates of the stage: one per
step for GPipe/1F1B, one per micro-batch for the asynchronous schedules.
"""
from __future__ import annotations

import math

LR_SCHEDULES = ("constant", "cosine")


def scheduled_lr(lr: float, update: int, total: int, schedule: str = "constant", warmup: int = 0,
                 min_ratio: float = 0.1, lr_init: float = 1e-7) -> float:
    """The learning rate of update ``update`` (0-based) of ``total``."""
    if schedule not in LR_SCHEDULES:
        raise ValueError(f"lr_schedule must be one of {LR_SCHEDULES}, got {schedule!r}")
    if warmup > 0 and update < warmup:
        return lr_init + (lr - lr_init) * (update + 1) / warmup
    if schedule == "constant":
        return lr
    decay = min(1.0, max(0.0, (update - warmup) / max(1, total - warmup)))
    return min_ratio * lr + (1.0 - min_ratio) * lr * 0.5 * (1.0 + math.cos(math.pi * decay))
