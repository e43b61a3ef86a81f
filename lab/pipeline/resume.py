"""A pipeline rank's state at a step boundary, for checkpoints (:mod:`lab.run.checkpoint`).

Synchronous schedules (GPipe, 1F1B) flush the pipeline at each update, so after a step's
update nothing of it is in flight but the sends still queued (flushed here) and the sparse
averages (captured with their values by :meth:`SparseAverager.state_dict`). Asynchronous
schedules never flush: a checkpoint would cut micro-batches in flight, so they are refused.
Captured: the stage's weights and optimizer, the worker's counters and per-step measurements,
the ledgers (every byte of the checkpointed steps), the averager, the straggler's generator and
the process-wide generators.
"""
from __future__ import annotations

from .. import state as state_mod
from ..run.checkpoint import rng_state, set_rng_state

#: The schedules that flush at each update, so a step boundary is a checkpoint.
FLUSHING = ("gpipe", "1f1b")
_WORKER = ("version", "log", "compute", "idle", "peak_bytes", "peak_stash", "losses")


def check(cfg) -> None:
    """Refuse, before launch, a schedule that keeps micro-batches in flight across updates."""
    if cfg.schedule not in FLUSHING:
        raise ValueError(f"checkpoint/resume: schedule={cfg.schedule!r} keeps micro-batches in "
                         f"flight across updates; supported: {', '.join(FLUSHING)}")


def capture(module, opt, worker, mesh, avg, ends: dict, info: dict) -> dict:
    """Everything this rank needs to continue after the step just updated."""
    for link in mesh.links.values():
        link.flush()  # this step's sends are on the wire and in their ledgers
    return {
        "model": module.state_dict(), "optimizer": opt.state_dict(),
        "worker": {k: getattr(worker, k) for k in _WORKER},
        "straggler": state_mod.state_dict(worker.straggler),
        "ends": dict(ends), "info": {k: list(v) for k, v in info.items()},
        "ledger": list(mesh.ledger.records),
        "links": {n: (list(link.comm.ledger.records), dict(link.busy_s))
                  for n, link in mesh.links.items()},
        "avg": avg.state_dict() if avg is not None else None,
        "rng": rng_state(),
    }


def restore(saved: dict, module, opt, worker, mesh, avg, ends: dict, info: dict) -> int:
    """Put a :func:`capture` back into this rank's fresh pieces; returns the next step."""
    module.load_state_dict(saved["model"])
    opt.load_state_dict(saved["optimizer"])
    for k in _WORKER:
        setattr(worker, k, saved["worker"][k])
    state_mod.load_state_dict(worker.straggler, saved["straggler"])
    ends.update(saved["ends"])
    info.update(saved["info"])
    mesh.ledger.records[:0] = saved["ledger"]
    for n, (records, busy) in saved["links"].items():
        mesh.links[n].comm.ledger.records[:0] = records
        mesh.links[n].busy_s.update(busy)
    if avg is not None:
        avg.load_state_dict(saved["avg"])
    set_rng_state(saved["rng"])
    return len(saved["ends"])
