"""``sync``: the whole model's gradients are exchanged after backward (the baseline)."""
from __future__ import annotations

import time

from ..argspec import Arg, takes
from ..engine import StepResult
from . import stamps
from .base import Schedule, register, sync_device


@register("sync")
@takes(arrival=Arg(str, choices=("last", "own"), help="on an emulated link, the exchange "
                                                      "starts when the last rank (or this one) "
                                                      "arrives"))
class Sync(Schedule):
    """Backward; then (unless the averaging scheme says this step is local) each rank's message
    (its gradients, or the aggregator's ``local`` version of them; an attack may replace it) is
    averaged over ranks by the aggregator; then the optimizer steps.

    On an emulated link (``link="model"``) a real allreduce cannot finish before the last rank
    has handed it its part: with ``arrival="last"`` (the default) a rank that arrived early
    waits until the last rank's arrival plus the exchange's modeled time, as the overlapping
    schedules' links do (:mod:`lab.schedule.stamps`), instead of finishing early and hiding the
    skew between the ranks in the emulated sleep."""

    name = "sync"

    def __init__(self, engine, arrival: str = "last"):
        super().__init__(engine)
        e = engine
        emulated = (e.cfg.network is not None or e.cfg.network_schedule is not None) \
            and e.comm.link == "model"
        board = stamps.board(e.comm) if arrival == "last" and emulated else None
        # two slots, used in turn by even and odd steps: a rank that is done with step t may
        # post step t + 1 before a slower one has read step t (one slot would be overwritten,
        # and the reader would wait out its timeout for a stamp that is gone)
        self.stamps = board.channel(2) if board is not None else None

    def step(self, step, x, y):
        e = self.engine
        loss, compute = self.forward_backward(step, x, y)
        t1 = time.perf_counter()
        mark = e.comm.ledger.mark()
        if self.stamps is not None:
            self.stamps.post(step, step % 2, t1)
        grads = [p.grad for p in e.params]
        send = e.averaging is None or e.averaging.exchange_gradients(step)
        if send:  # the honest message (e.g. a worker momentum), which an attack may replace
            grads = e.aggregator.local(grads, step)
        if e.attack is not None:
            grads = e.attack.on_gradient(grads, step)
        if send:
            grads = e.aggregator.aggregate(grads, step)
        sync_device(e.device)
        comm = self._from_last_arrival(step, t1, e.comm.ledger.since(mark))
        exchange = time.perf_counter() - t1
        for p, g in zip(e.params, grads):
            if g is not p.grad:
                p.grad.copy_(g)
        e.optimizer.step()
        if comm is None:
            return StepResult(float(loss), compute, exchange)
        return StepResult(float(loss), compute, exchange, comm_s=comm,
                          codec_s=max(0.0, exchange - comm))

    def _from_last_arrival(self, step: int, arrived: float, records) -> float | None:
        """Wait, if this rank arrived before the last one, until the last arrival plus the
        exchange's time outside its calls plus their modeled time; returns the seconds in
        communication (the records' and this wait), or None where nothing was emulated."""
        if self.stamps is None or not records or self.engine.comm.network is None:
            return None
        last = self.stamps.last(step, step % 2)
        now = time.perf_counter()
        in_calls = sum(r.seconds for r in records)
        if last is None or last <= arrived:
            return in_calls
        end = last + (now - arrived - in_calls) + sum(r.modeled for r in records)
        if end > now:
            time.sleep(end - now)
        return in_calls + max(0.0, time.perf_counter() - now)
