"""A data-parallel rank's state at a step boundary, for checkpoints (:mod:`lab.run.checkpoint`).

What a rank carries from one step to the next: the model and the optimizer (momentum, Adam's
moments), the state of every scheme at the loop's extension points (aggregator with its codec:
error-feedback residuals, PowerSGD's ``Q``, AR-Topk's leader; averaging; schedule; attack;
straggler), the process-wide random generators, the bytes its ledger counted, and its History
so far. The data sampler needs nothing: a batch is drawn from (seed, step). Captured through
:mod:`lab.state`'s protocol, so a scheme that adds state is covered without a change here.
"""
from __future__ import annotations

from types import SimpleNamespace

from .. import state as state_mod
from ..run.checkpoint import Checkpointer, load, rng_state, set_rng_state
from ..run.history import History
from ..run.stream import Tail

#: The schedules a checkpoint can capture: ``sync`` leaves nothing in flight after a step; the
#: overlapping ones drain their exchange in flight when their state is taken
#: (:meth:`lab.schedule.overlap.Overlap.state_dict`).
QUIESCENT_SCHEDULES = ("sync", "fifo", "p3", "slicing-only", "priority-only")


def check(cfg) -> None:
    """Refuse, before launch, a run whose state at a step boundary is not all capturable."""
    from .. import sync as sync_modes
    mode = sync_modes.REGISTRY.get(cfg.sync)
    if mode.own_loop:
        if not getattr(mode, "resumable", False):
            ok = [n for n in sync_modes.REGISTRY.names()
                  if getattr(sync_modes.REGISTRY.get(n), "resumable", False)]
            raise ValueError(f"checkpoint/resume: sync={cfg.sync!r} runs its own loop, whose "
                             f"in-flight state a checkpoint cannot capture; resumable: "
                             f"allreduce, {', '.join(ok)}")
        return
    if cfg.schedule not in QUIESCENT_SCHEDULES:
        raise ValueError(f"checkpoint/resume: schedule={cfg.schedule!r} may have communication in "
                         f"flight between steps; supported: {', '.join(QUIESCENT_SCHEDULES)}")


def capture(e, sched, h: History, past_bytes: int, ledger, mark: int, wall_s: float) -> dict:
    """Everything rank-local needed to continue after the step just completed. The schedule's
    state is taken first: an overlapping one drains its exchange in flight, whose ledger
    records (``pending``, past ``mark``) the next step would have counted; the resumed run
    counts them in its first step instead."""
    schedule_state = state_mod.state_dict(sched)
    pending = list(ledger.since(mark))
    return {
        "model": e.model.state_dict(), "optimizer": e.optimizer.state_dict(),
        "schemes": {k: state_mod.state_dict(getattr(e, k))
                    for k in ("aggregator", "averaging", "attack", "straggler")},
        "schedule": schedule_state, "pending": pending,
        "extra": state_mod.default_state(SimpleNamespace(**e.extra)),
        "rng": rng_state(),
        "ledger_bytes": past_bytes + ledger.total_bytes() - sum(r.bytes for r in pending),
        "wall_s": wall_s, "history": h,
    }


def restore(e, sched, saved: dict) -> History:
    """Put a :func:`capture` back into a freshly built engine and schedule; returns the
    History so far (the caller appends to it)."""
    e.model.load_state_dict(saved["model"])
    e.optimizer.load_state_dict(saved["optimizer"])
    for k, st in saved["schemes"].items():
        state_mod.load_state_dict(getattr(e, k), st)
    state_mod.load_state_dict(sched, saved["schedule"])
    extra = SimpleNamespace(**e.extra)
    state_mod.load_default_state(extra, saved["extra"])
    e.extra.update(vars(extra))
    e.comm.ledger.records.extend(saved["pending"])  # counted in the first resumed step
    set_rng_state(saved["rng"])  # last: building the engine drew from them
    return saved["history"]


class Keeper:
    """What the loop keeps beside training, per rank: the History (fresh, or the checkpointed
    one when resuming, with the step to go on from, ``first``), rank 0's stream of it to the
    caller, and the checkpoints. With neither stream nor checkpoint it does nothing per step."""

    def __init__(self, ctx, cfg, e, sched, stream=None, checkpoint: dict | None = None):
        self.ctx, self.cfg, self.e, self.sched, self.stream = ctx, cfg, e, sched, stream
        self.history = History(cfg.to_dict(), ctx.world_size)
        self.first, self.past_bytes, self.past_wall, self.ck = 0, 0, 0.0, None
        self.carried = 0  # ledger records a resumed run carries into its first step
        if checkpoint is not None:
            if checkpoint["every"]:
                self.ck = Checkpointer(checkpoint["every"], checkpoint["dir"], ctx.rank,
                                       ctx.world_size, cfg.to_dict(), "train")
            if checkpoint["resume"] is not None:
                saved = load(checkpoint["resume"], ctx.rank)
                self.history = restore(e, sched, saved)
                self.first = self.history.steps
                self.past_bytes, self.past_wall = saved["ledger_bytes"], saved["wall_s"]
                self.carried = len(saved["pending"])
        self.tail = Tail() if stream is not None and ctx.rank == 0 else None
        if self.tail is not None and self.first:
            ctx.stream((stream, self.tail.delta(self.history)))  # the checkpointed part first

    def after_step(self, done: int, ledger, mark: int, wall_s: float) -> None:
        """Stream the step to the caller; checkpoint if due (``ledger``: this rank's, ``mark``:
        the loop's position in it, ``wall_s``: this launch's part of the run)."""
        h = self.history
        if self.tail is not None:
            h.wall_s = self.past_wall + wall_s
            self.ctx.stream((self.stream, self.tail.delta(h)))
        if self.ck is not None and self.ck.due(done, self.cfg.steps):
            self.ck.write(done, capture(self.e, self.sched, h, self.past_bytes, ledger, mark,
                                        self.past_wall + wall_s))
