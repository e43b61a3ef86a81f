"""The overlap engine shared by ``fifo``, ``p3`` and the ablations.

- backward hands each layer's gradient to communication as soon as it is accumulated
  (``register_post_accumulate_grad_hook`` on every parameter of the layer);
- one daemon thread drains a queue of steps, exchanges the units (whole layers or slices) of
  each step through the aggregator in an order fixed in advance (:mod:`lab.schedule.plan`: the
  same on every rank), and when a layer's last unit is back applies that layer's optimizer step;
- up to ``in_flight`` units are on the wire at once (default 1: each pays the link's latency
  on its own; more let their latencies overlap, as the slices sent to P3's parameter servers
  do, but a high-priority slice that becomes ready then queues behind more sent ones);
- the next forward waits per layer (a forward pre-hook) only for the layer it is about to run,
  so layer 0 can start while the last layers are still on the wire.

The main thread's time spent waiting is the *exposed* communication (``StepResult.comm_s``);
the rest of the thread's time in collectives is *overlapped* (series ``overlapped_comm_s``).
Every byte still goes through ``lab.comm`` and lands in the ledger; records carry the step
whose gradient they carry. An exception in the thread wakes the main thread, which re-raises
it, so a failing rank still ends the launch with its traceback.
"""
from __future__ import annotations

import collections
import copy
import queue
import threading
import time

import torch

from ..comm import CommLedger, Network
from ..engine import StepResult
from .base import Schedule
from .plan import check_in_flight, check_slice_size, issue_order, make_units

# Planning only (never a clock): a loopback link as measured with gloo on a 2-core machine.
LOOPBACK = Network(latency=3e-4, bandwidth=0.7e9, name="loopback")
_POLL = 0.05  # seconds between checks for a failed peer thread while waiting


class _Abort(Exception):
    pass


class Overlap(Schedule):
    """Exchange layer by layer during backward; subclasses set ``slice_size`` and ``priority``."""

    slice_size: int | None = None   # None: whole layers
    priority: bool = False          # False: backward (FIFO) order; True: forward order first
    options = ("in_flight", "timeline")  # schedule_kw this schedule accepts

    @classmethod
    def check(cls, cfg, workers) -> None:
        for k in cfg.schedule_kw:
            if k not in cls.options:
                raise ValueError(f"schedule_kw {k!r} is not an option of schedule {cls.name!r} "
                                 f"(options: {', '.join(cls.options)})")
        if "slice_size" in cfg.schedule_kw:
            check_slice_size(cfg.schedule_kw["slice_size"])
        if "in_flight" in cfg.schedule_kw:
            check_in_flight(cfg.schedule_kw["in_flight"])
        for arg, value, default in (("averaging", cfg.averaging, "none"), ("attack", cfg.attack, "none"),
                                    ("sync", cfg.sync, "allreduce")):
            if value != default:
                raise ValueError(f"schedule={cls.name!r} exchanges gradients on its own thread; "
                                 f"it needs {arg}={default!r}, got {value!r}")
        if cfg.aggregator not in ("auto", "allreduce", "compressed"):
            raise ValueError(f"schedule={cls.name!r} reduces slice by slice: aggregator must be "
                             f"'allreduce' or 'compressed' (a codec), got {cfg.aggregator!r}")

    def __init__(self, engine, slice_size: int | None = None, timeline: bool = False,
                 in_flight: int = 1):
        super().__init__(engine)
        e = engine
        if slice_size is not None:
            check_slice_size(slice_size)
            self.slice_size = slice_size
        check_in_flight(in_flight)
        self.in_flight = in_flight
        self.timeline = bool(timeline)
        owned = {id(p) for p in e.params}
        self.layers = [(m, [p for p in m.parameters(recurse=False) if id(p) in owned])
                       for m in e.model.modules()]
        self.layers = [(m, ps) for m, ps in self.layers if ps]   # forward (registration) order
        sizes = [sum(p.numel() for p in ps) for _, ps in self.layers]
        self.units = make_units(sizes, self.slice_size)
        # one optimizer per layer, so a layer is updated the moment its gradient is back
        opt = e.optimizer
        self.opts = [type(opt)(ps, **opt.defaults) for _, ps in self.layers]
        # the thread's Collective: same group, network and ledger records; its own step counter
        self.comm = copy.copy(e.comm)
        self.comm.ledger = CommLedger(records=e.comm.ledger.records)
        e.aggregator.comm = self.comm
        n = len(self.layers)
        self.ready = [threading.Event() for _ in range(n)]
        self.applied = [threading.Event() for _ in range(n)]
        for ev in self.applied:
            ev.set()
        self.ready_at = self._profile()
        self._plans: dict = {}
        self._hooks = []
        for layer, (m, ps) in enumerate(self.layers):
            self._hooks.append(m.register_forward_pre_hook(self._before_forward(layer)))
            for p in ps:
                self._hooks.append(p.register_post_accumulate_grad_hook(self._grad_ready(layer)))
        self.origin = time.perf_counter()
        self.events, self.busy, self.waited, self._last_end = [], 0.0, 0.0, 0.0
        self._wake = threading.Event()  # a gradient is ready or an exchange has finished
        self.error: BaseException | None = None
        self.stopping, self.closed = False, False
        self.jobs: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._drain, name="lab-comm", daemon=True)
        self.thread.start()

    # -- planning -------------------------------------------------------------------------
    def _profile(self) -> list[float]:
        """When each layer's gradient is ready, seconds after backward starts: one measured
        backward (eval mode: BatchNorm statistics untouched), then the maximum over ranks, so
        every rank plans the same order."""
        e, n, t = self.engine, len(self.layers), {}
        x, y = e.data.batch(0, e.cfg.batch_size, e.rank, e.world_size, e.cfg.seed)

        def stamp(layer):
            def hook(_p):
                t[layer] = time.perf_counter()  # the layer's last parameter counts
            return hook
        hooks = [p.register_post_accumulate_grad_hook(stamp(layer))
                 for layer, (_, ps) in enumerate(self.layers) for p in ps]
        e.model.eval()
        try:
            loss = e.loss_fn(e.model(x.to(e.device)), y.to(e.device))
            start = time.perf_counter()
            loss.backward()
        finally:
            e.model.train()
            for h in hooks:
                h.remove()
            e.optimizer.zero_grad(set_to_none=False)
        ready = torch.tensor([t.get(l, start) - start for l in range(n)], dtype=torch.float64)
        e.comm.allreduce(ready, op="max", tag="plan")
        return ready.tolist()

    def plan(self, network: Network | None) -> list[int]:
        """The issue order of the units on ``network`` (cached; the same on every rank)."""
        if network not in self._plans:
            net = network or LOOPBACK
            xfer = [net.time("allreduce", 4 * u.numel, self.engine.world_size) for u in self.units]
            self._plans[network] = issue_order(self.units, self.ready_at, xfer, self.priority)
        return self._plans[network]

    # -- hooks (main thread) --------------------------------------------------------------
    def _grad_ready(self, layer):
        def hook(_p):
            self._left[layer] -= 1
            if self._left[layer] == 0:
                self._event("ready", layer)
                self.ready[layer].set()
                self._wake.set()
        return hook

    def _before_forward(self, layer):
        def hook(_module, _inputs):
            self._wait(self.applied[layer])
            self._event("fwd", layer)
        return hook

    def _wait(self, ev: threading.Event) -> None:
        t0 = time.perf_counter()
        while not ev.wait(_POLL):
            if self.error is not None or not self.thread.is_alive():
                break
        self.waited += time.perf_counter() - t0
        if self.error is not None:
            raise RuntimeError(f"rank {self.engine.rank}: the communication thread failed") \
                from self.error

    def _event(self, *ev) -> None:
        if self.timeline:
            self.events.append([*ev, time.perf_counter() - self.origin])

    # -- the step -------------------------------------------------------------------------
    def step(self, step, x, y):
        e = self.engine
        t0 = time.perf_counter()
        self.waited, busy0 = 0.0, self.busy
        self._event("start", -1)
        out = e.model(x)                       # waits, layer by layer, for the last exchange
        for ev in self.applied:                # layers the forward did not reach
            self._wait(ev)
        loss = e.loss_fn(out, y)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"step {step}: loss is {loss.item()} on rank {e.rank} "
                                     f"(lr={e.cfg.lr} too large?)")
        e.optimizer.zero_grad(set_to_none=False)
        self._left = [len(ps) for _, ps in self.layers]
        for r, a in zip(self.ready, self.applied):
            r.clear()
            a.clear()
        self.jobs.put((step, self.plan(e.comm.network), e.comm.network))
        self._event("backward", -1)
        loss.backward()
        if e.straggler is not None:  # slows compute, not the waiting
            e.straggler.pause(time.perf_counter() - t0 - self.waited)
        if step == e.cfg.steps - 1:            # the last step: the model must be complete
            for ev in self.applied:
                self._wait(ev)
        self._event("end", -1)
        wall = time.perf_counter() - t0
        exposed = self.waited
        info = {"overlapped_comm_s": max(0.0, self.busy - busy0 - exposed)}
        if self.timeline:
            info["events"], self.events = self.events, []
        return StepResult(float(loss.detach()), wall - exposed, exposed, comm_s=exposed,
                          codec_s=0.0, info=info)

    # -- the communication thread ---------------------------------------------------------
    def _drain(self) -> None:
        try:
            while (job := self.jobs.get()) is not None:
                self._exchange(*job)
        except _Abort:
            pass
        except BaseException as exc:  # surfaced by the main thread's next wait
            self.error = exc
            for ev in self.applied:
                ev.set()

    def _exchange(self, step: int, order: list[int], network) -> None:
        e = self.engine
        self.comm.ledger.step, self.comm.network = step, network
        flat, left, pending = {}, [0] * len(self.layers), collections.deque()
        for u in self.units:
            left[u.layer] += 1
        for i in order:
            u = self.units[i]
            self._until(lambda: self.ready[u.layer].is_set(), pending, left, flat)
            if u.layer not in flat:  # the layer's gradient as one vector, and room for its mean
                g = torch.cat([p.grad.reshape(-1) for p in self.layers[u.layer][1]])
                flat[u.layer] = (g, torch.empty_like(g))
            self._until(lambda: len(pending) < self.in_flight, pending, left, flat)
            grad, avg = flat[u.layer]
            unit = {"unit": u, "start": time.perf_counter()}
            unit["future"] = fut = e.aggregator.reduce_async(
                grad[u.start:u.stop], (u.layer, u.start), step, out=avg[u.start:u.stop])
            pending.append(unit)
            fut.add_done_callback(lambda _f, unit=unit: self._arrived(unit))
        self._until(lambda: not pending, pending, left, flat)

    def _arrived(self, unit: dict) -> None:  # any thread: the unit's exchange is complete
        unit["end"] = time.perf_counter()
        self._wake.set()

    def _until(self, cond, pending, left, flat) -> None:
        """Collect finished units (in issue order; a layer whose last unit is back is applied)
        until ``cond()``; a gradient hook or a finished exchange wakes the thread."""
        while True:
            self._wake.clear()
            while pending and "end" in pending[0]:
                unit = pending.popleft()
                unit["future"].wait()  # raises the exchange's error, if any
                u, t0, t1 = unit["unit"], unit["start"], unit["end"]
                # time with something on the wire: the union of the units' intervals
                self.busy += max(0.0, t1 - max(t0, self._last_end))
                self._last_end = max(self._last_end, t1)
                if self.timeline:
                    self.events.append(["comm", u.layer, u.start, t0 - self.origin, t1 - self.origin])
                left[u.layer] -= 1
                if left[u.layer] == 0:
                    self._apply(u.layer, flat[u.layer][1])
            if cond():
                return
            if self.stopping:
                raise _Abort
            self._wake.wait(_POLL)

    def _apply(self, layer: int, avg: torch.Tensor) -> None:
        ps = self.layers[layer][1]
        for p, g in zip(ps, avg.split([p.numel() for p in ps])):
            p.grad.copy_(g.view_as(p))
        self.opts[layer].step()
        self.applied[layer].set()

    def close(self) -> None:
        """Stop the thread (the last step already waited for its exchange); safe twice."""
        if self.closed:
            return
        self.closed, self.stopping = True, True
        self.jobs.put(None)
        self._wake.set()
        self.thread.join(timeout=1.0)
        for h in self._hooks:
            h.remove()
        for ev in self.applied:
            ev.set()
