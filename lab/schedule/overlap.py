"""The overlap engine shared by ``fifo``, ``p3`` and the ablations.

- layers are the modules that own parameters, in the order one traced forward pass first uses
  them (:func:`lab.models.trace_forward`), not registration order; each waits in the pre-hook
  of the module that uses it (attention reads ``out_proj`` without calling it);
- backward hands each layer's gradient to communication as soon as it is accumulated
  (``register_post_accumulate_grad_hook`` on every parameter of the layer);
- one long-lived thread per rank sends *messages* in an order fixed in advance
  (:mod:`lab.schedule.plan`: the same on every rank; adjacent small units coalesced) through
  the aggregator; it never sleeps on the emulated link: its
  :class:`~lab.comm.network.LinkClock` books each message at its own time and says when the
  link would have delivered it;
- the messages' real bytes travel in *real calls* (``calls``): on an emulated link, one call
  per step once backward is done (``"step"``): the link's timeline is the clock's, the next
  forward needs none of the bytes before backward ends, and on a CPU whose ranks share its
  cores a real call is a rendezvous of every rank's thread that costs more than the bytes
  (measured in Part 7.2: VGG-like, 2 ranks, 1 Gb/s, 0.90x sync with calls as planned, 1.14x
  with one); on a real network (no emulated link) the calls follow the plan
  (``"plan"``, :func:`lab.schedule.plan.batches`), so the real bytes overlap backward;
- when a layer's last unit is back the thread applies that layer's optimizer step, and the
  layer is available at ``max(link delivery + update time, now)``;
- the next forward waits per layer (a forward pre-hook), sleeping only until that time, so
  layer 0 can start while the last layers are still on the (emulated) wire.

The main thread's time spent waiting is the *exposed* communication (``StepResult.comm_s``);
the link's busy time not waited for is *overlapped* (series ``overlapped_comm_s``); the thread's
wall time in real calls (including waiting for the other ranks' threads) and updates is the
series ``thread_s``; ``messages`` and ``calls`` count the link's messages and the real calls
per step. Every byte still goes through
``lab.comm`` and lands in the ledger; records carry the step whose gradient they carry. An
exception in the thread wakes the main thread, which re-raises it, so a failing rank still ends
the launch with its traceback.

Here: the plan, the step, the exchange and the per-layer update (:class:`Overlap`). The layer
order comes from :mod:`lab.schedule.layers` (:func:`traced_layers`, re-exported here); the
events, hooks and thread that hand layers between the main and communication threads are in
:mod:`lab.schedule.handoff`.
"""
from __future__ import annotations

import copy
import time

import torch

from ..comm import CommLedger, Network
from ..comm.network import LinkClock
from ..engine import StepResult
from .base import Schedule
from .handoff import LayerHandoff
from .layers import traced_layers
from .plan import (P3_SLICE_SIZE, batches, check_in_flight, check_slice_size, coalesce, issue_order,
                   make_units)

# Planning only (never a clock): a loopback link as measured with gloo on a 2-core machine.
LOOPBACK = Network(latency=3e-4, bandwidth=0.7e9, name="loopback")


class Overlap(LayerHandoff, Schedule):
    """Exchange layer by layer during backward; subclasses set ``slice_size`` and ``priority``."""

    slice_size: int | None = None   # None: whole layers
    priority: bool = False          # False: backward (FIFO) order; True: forward order first
    coalesce: int | None = None     # values per message, adjacent small units joined (0: off;
                                    # None: the slice size, or P3's for whole layers)
    options = ("in_flight", "timeline", "coalesce", "calls")  # schedule_kw this schedule accepts
    CALLS = ("auto", "step", "plan")   # real calls: auto = step on an emulated link, else plan

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
        if "coalesce" in cfg.schedule_kw:
            coalesce([], [], [], [], cfg.schedule_kw["coalesce"])
        if cfg.schedule_kw.get("calls", "auto") not in cls.CALLS:
            raise ValueError(f"schedule_kw calls must be one of {cls.CALLS}, got "
                             f"{cfg.schedule_kw['calls']!r}")
        for arg, value, default in (("averaging", cfg.averaging, "none"), ("attack", cfg.attack, "none"),
                                    ("sync", cfg.sync, "allreduce")):
            if value != default:
                raise ValueError(f"schedule={cls.name!r} exchanges gradients on its own thread; "
                                 f"it needs {arg}={default!r}, got {value!r}")
        if cfg.aggregator not in ("auto", "allreduce", "compressed"):
            raise ValueError(f"schedule={cls.name!r} reduces slice by slice: aggregator must be "
                             f"'allreduce' or 'compressed' (a codec), got {cfg.aggregator!r}")

    def __init__(self, engine, slice_size: int | None = None, timeline: bool = False,
                 in_flight: int = 1, coalesce: int | None = None, calls: str = "auto"):
        super().__init__(engine)
        e = engine
        if calls not in self.CALLS:
            raise ValueError(f"calls must be one of {self.CALLS}, got {calls!r}")
        self.calls = calls
        if slice_size is not None:
            check_slice_size(slice_size)
            self.slice_size = slice_size
        # messages up to one slice (whole-layer schedules: up to P3's slice size, like DDP's buckets)
        self.coalesce = coalesce if coalesce is not None else (self.slice_size or P3_SLICE_SIZE)
        check_in_flight(in_flight)
        self.in_flight = in_flight
        self.timeline = bool(timeline)
        self.layers, sites = self._trace()
        sizes = [sum(p.numel() for p in ps) for _, ps in self.layers]
        self.units = make_units(sizes, self.slice_size)
        # one optimizer per layer, so a layer is updated the moment its gradient is back
        opt = e.optimizer
        self.opts = [type(opt)(ps, **opt.defaults) for _, ps in self.layers]
        # the thread's Collective: same group, network and ledger records; its own step
        # counter; a virtual link clock instead of sleeping
        self.comm = copy.copy(e.comm)
        self.comm.ledger = CommLedger(records=e.comm.ledger.records)
        self.comm.clock = LinkClock(in_flight)
        e.aggregator.comm = self.comm
        self.ready_at = self._profile()
        self._plans: dict = {}
        self.link_busy, self.thread_s = 0.0, 0.0
        self._start_thread(sites)   # events, hooks, the thread (lab.schedule.handoff)

    # -- planning -------------------------------------------------------------------------
    def _trace(self):
        e = self.engine
        x, _ = e.data.batch(0, e.cfg.batch_size, e.rank, e.world_size, e.cfg.seed)
        return traced_layers(e.model, x.to(e.device), e.params)

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

    def plan(self, network: Network | None) -> tuple[list[list[int]], list[list[int]]]:
        """On ``network``: the messages (lists of unit indices, in issue order) and the real
        calls that carry them (lists of message indices); cached, the same on every rank."""
        if network not in self._plans:
            net, p = network or LOOPBACK, self.engine.world_size
            xfer = [net.time("allreduce", 4 * u.numel, p) for u in self.units]
            order = issue_order(self.units, self.ready_at, xfer, self.priority)
            msgs = coalesce(self.units, order, self.ready_at, xfer, self.coalesce)
            if self.calls == "step" or (self.calls == "auto" and network is not None):
                self._plans[network] = msgs, [list(range(len(msgs)))]   # one real call
            else:
                real = [LOOPBACK.time("allreduce", 4 * u.numel, p)
                        - LOOPBACK.time("allreduce", 0, p)
                        for u in self.units]   # bytes only: the call pays one real latency
                self._plans[network] = msgs, batches(self.units, msgs, self.ready_at, xfer, real)
        return self._plans[network]

    # -- the step -------------------------------------------------------------------------
    def step(self, step, x, y):
        e = self.engine
        t0 = time.perf_counter()
        self.waited, busy0, thread0 = 0.0, self.link_busy, self.thread_s
        self._event("start", -1)
        out = e.model(x)                       # waits, layer by layer, for the last exchange
        for layer in range(len(self.layers)):  # layers the forward did not use
            self._wait(layer)
        loss = e.loss_fn(out, y)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"step {step}: loss is {loss.item()} on rank {e.rank} "
                                     f"(lr={e.cfg.lr} too large?)")
        e.optimizer.zero_grad(set_to_none=False)
        self._left = [len(ps) for _, ps in self.layers]
        for r, a in zip(self.ready, self.applied):
            r.clear()
            a.clear()
        plan = self.plan(e.comm.network)
        self.jobs.put((step, plan, e.comm.network))
        self._event("backward", -1)
        loss.backward()
        if e.straggler is not None:  # slows compute, not the waiting
            e.straggler.pause(time.perf_counter() - t0 - self.waited)
        if step == e.cfg.steps - 1:            # the last step: the model must be complete
            for layer in range(len(self.layers)):
                self._wait(layer)
        self._event("end", -1)
        wall = time.perf_counter() - t0
        exposed = self.waited
        # the previous step's exchange ran during this one: busy link and thread time so far
        info = {"overlapped_comm_s": max(0.0, self.link_busy - busy0 - exposed),
                "thread_s": self.thread_s - thread0, "messages": len(plan[0]), "calls": len(plan[1])}
        if self.timeline:
            info["events"], self.events = self.events, []
        return StepResult(float(loss.detach()), wall - exposed, exposed, comm_s=exposed,
                          codec_s=0.0, info=info)

    # -- the communication thread ---------------------------------------------------------
    def _exchange(self, step: int, plan, network) -> None:
        e, clock = self.engine, self.comm.clock
        msgs, calls = plan
        self.comm.ledger.step, self.comm.network = step, network
        left = [0] * len(self.layers)
        for u in self.units:
            left[u.layer] += 1
        flat: dict = {}
        for call in calls:
            units = [self.units[i] for k in call for i in msgs[k]]
            for u in units:
                self._until_ready(u.layer)
                if u.layer not in flat:  # the layer's gradient as one vector
                    flat[u.layer] = torch.cat([p.grad.reshape(-1) for p in self.layers[u.layer][1]])
            t0, free = time.perf_counter(), clock.free
            total = sum(u.numel for u in units)
            clock.pieces = [(sum(self.units[i].numel for i in msgs[k]) / total,
                             max(self.ready_t[self.units[i].layer] for i in msgs[k])) for k in call]
            parts = [flat[u.layer][u.start:u.stop] for u in units]
            avg = e.aggregator.reduce(parts[0] if len(parts) == 1 else torch.cat(parts),
                                      (units[0].layer, units[0].start), step)
            now = time.perf_counter()
            spans = clock.spans if network is not None else [(t0, now)] * len(call)
            self.link_busy += max(0.0, spans[-1][1] - max(spans[0][0], free))
            at = 0
            for k, (start, end) in zip(call, spans):
                end = max(end, now)
                self._event("send", sum(self.units[i].numel for i in msgs[k]),
                            start - self.origin, end - self.origin)
                for i in msgs[k]:
                    u = self.units[i]
                    flat[u.layer][u.start:u.stop].copy_(avg[at:at + u.numel])
                    at += u.numel
                    self._event("comm", u.layer, u.start, start - self.origin, end - self.origin)
                    left[u.layer] -= 1
                    if left[u.layer] == 0:
                        self._apply(u.layer, flat.pop(u.layer), end)
            self.thread_s += time.perf_counter() - t0

    def _apply(self, layer: int, avg: torch.Tensor, delivered: float) -> None:
        """The layer's optimizer step on its mean gradient. On the emulated link the update can
        only start when the bytes are delivered, so the layer is available that much later."""
        t0 = time.perf_counter()
        ps = self.layers[layer][1]
        for p, g in zip(ps, avg.split([p.numel() for p in ps])):
            p.grad.copy_(g.view_as(p))
        self.opts[layer].step()
        now = time.perf_counter()
        self.avail_t[layer] = max(delivered + (now - t0), now)
        self.applied[layer].set()

    def state_dict(self) -> dict:
        """For a checkpoint (:mod:`lab.state`): waits for the exchange in flight, so the model
        is complete, then gives the per-layer optimizers' state (momentum, Adam's moments). The
        link clock is timing, measured anew by a resumed run; the profile the plans come from is
        kept."""
        self.drain()
        return {"opts": [o.state_dict() for o in self.opts], "ready_at": list(self.ready_at)}

    def load_state_dict(self, state: dict) -> None:
        for opt, s in zip(self.opts, state["opts"], strict=True):
            opt.load_state_dict(s)
        # the original run's profile, so the resumed run issues the same messages (the
        # summation order of a slice over more than two ranks depends on them)
        self.ready_at, self._plans = list(state["ready_at"]), {}
