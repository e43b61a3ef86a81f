"""What a failed pipeline run keeps: the steps every rank completed, rebuilt in the caller from
the line each rank streams per step (:class:`~lab.run.RunFailed`)."""
from __future__ import annotations

import numpy as np

from ..run.history import History
from .config import PipelineConfig


def partial(cfg: PipelineConfig, records: list) -> History | None:
    """The History of the steps every rank completed, from the lines they streamed (loss,
    step time and compute; bytes are counted by the ledgers of the ranks, gone with them)."""
    by_step: dict[int, dict] = {}
    for _, (step, rank, loss, end, compute) in records:
        by_step.setdefault(step, {})[rank] = (loss, end, compute)
    done = 0
    while len(by_step.get(done, {})) == cfg.world_size:
        done += 1
    if not done:
        return None
    h = History(config=cfg.to_dict(), world_size=cfg.world_size)
    last_end = 0.0
    for t in range(done):
        rows = by_step[t].values()
        end = max(r[1] for r in rows)
        h.loss.append(float(np.mean([r[0] for r in rows if r[0] is not None])))
        h.compute_s.append(float(min(np.mean([r[2] for r in rows]), end - last_end)))
        h.comm_s.append(end - last_end - h.compute_s[-1])
        h.codec_s.append(0.0)
        last_end = end
    h.wall_s = last_end
    return h
