"""The overlap engine shared by ``fifo``, ``p3`` and the ablations.

- layers are the modules that own parameters, in the order one traced forward pass first uses
  them (:func:`lab.models.trace_forward`), not registration order; each waits in the pre-hook
  of the module that uses it (attention reads ``out_proj`` without calling it); their
  parameters and gradients are views of one flat buffer each (:mod:`lab.schedule.flat`);
- backward hands each layer's gradient to communication as soon as it is accumulated
  (``register_post_accumulate_grad_hook``; the layer's last parameter hands it over);
- one long-lived thread per rank (at real-time priority where the process may set it,
  :mod:`lab.schedule.realtime`) sends *messages* in an order fixed in advance
  (:mod:`lab.schedule.plan`: the same on every rank; adjacent small units coalesced) through
  the aggregator; up to ``in_flight`` messages (2 by default) share the link, the next one's
  latency overlapping the bytes of those before it;
- on an emulated link the thread never sleeps: it books every message, in the plan's order, on
  a virtual :class:`~lab.comm.network.LinkClock`, starting when the *last* rank had its layers
  ready (:mod:`lab.schedule.stamps`), as a real link would, and the messages' real bytes travel
  in *real calls* (``calls``): by default (``"head"``) two per step once backward is done,
  first the messages of the first layers (those the next forward needs first: a few kB), then
  the rest; ``"step"``: one. On a CPU whose ranks share its cores a real call is a rendezvous
  of every rank's thread that costs more than its bytes (measured in Part 7.2), so the real
  bytes do not follow the plan during backward; the head call brings layer 0 back a millisecond
  or two after the last rank's backward (2 ranks), where one call for the whole model took
  5-12 ms;
- on a kernel link (:mod:`lab.comm.kernel`) each message is a real call, so its bytes take the
  wire when the plan says and in its order; on a real network (no emulated link) the calls
  follow the plan (``"plan"``, :func:`lab.schedule.plan.batches`);
- when a layer's last unit is back the thread applies that layer's optimizer step, and the
  layer is available at ``max(link delivery + update time, now)``;
- the next forward waits per layer (a forward pre-hook), sleeping only until that time, so
  layer 0 can start while the last layers are still on the (emulated) wire.

The main thread's time spent waiting is the *exposed* communication (``StepResult.comm_s``);
the link's busy time not waited for is *overlapped* (series ``overlapped_comm_s``); the thread's
wall time in real calls and updates is the series ``thread_s``; ``messages`` and ``calls``
count the link's messages and the real calls per step. Every byte goes through ``lab.comm`` and
lands in the ledger; records carry the step whose gradient they carry. An exception in the
thread wakes the main thread, which re-raises it. The threads and hooks are in
:mod:`lab.schedule.handoff`, the layer order in :mod:`lab.schedule.layers`.
"""
from __future__ import annotations

import copy
import time

import torch

from ..argspec import Arg, takes
from ..comm import CommLedger, Network
from ..comm.network import LinkClock
from ..engine import StepResult
from . import realtime, stamps
from .base import Schedule
from .exchange import Exchange
from .flat import flatten, is_view
from .handoff import LayerHandoff
from .layers import traced_layers  # noqa: F401  (re-exported: lab.sync.p3_server uses it)
from .plan import (IN_FLIGHT, P3_SLICE_SIZE, batches, coalesce, head_calls, head_layers,
                   issue_order, make_units)

# Planning only (never a clock): a loopback link as measured with gloo on a 2-core machine.
LOOPBACK = Network(latency=3e-4, bandwidth=0.7e9, name="loopback")
CALLS = ("auto", "head", "step", "message", "plan")


@takes(slice_size=Arg(int, ge=1, none=True, help="values per slice (None: whole layers)"),
       timeline=Arg(bool, help="record each message's times"),
       in_flight=Arg(int, ge=1, le=1024, help="messages on the wire at once"),
       coalesce=Arg(int, ge=0, none=True, help="values per message, small units joined "
                                               "(0: off; None: the slice size)"),
       calls=Arg(str, choices=CALLS, help="real calls: the first layers' then the rest "
                                          "(head), one a step, one a message, as planned, or "
                                          "auto (head on an emulated link, message on a "
                                          "kernel link, plan without a link)"),
       head=Arg(int, ge=0, help="values of the first layers the head call carries"),
       realtime=Arg(bool, help="communication threads at real-time priority where permitted"),
       flat=Arg(bool, help="parameters and gradients as views of one flat buffer"),
       arrival=Arg(str, choices=("last", "own"), help="an emulated message starts when the "
                                                      "last rank (or this one) is ready"),
       ready_at=Arg(tuple, none=True, of=Arg(float, ge=0),
                    help="seconds after backward starts at which each layer's gradient is "
                         "ready, forward order (None: measured in one profiled backward)"))
class Overlap(Exchange, LayerHandoff, Schedule):
    """Exchange layer by layer during backward; subclasses set ``slice_size`` and ``priority``."""

    slice_size: int | None = None   # None: whole layers
    priority: bool = False          # False: backward (FIFO) order; True: forward order first
    options = ("in_flight", "timeline", "coalesce", "calls", "head", "realtime", "flat",
               "arrival", "ready_at")  # schedule_kw this schedule accepts
    CALLS = CALLS

    @classmethod
    def check_config(cls, cfg) -> None:
        """Before launch, with the config (the values of ``schedule_kw`` are checked from the
        declaration): the options this schedule takes, and the schemes it runs with."""
        for k in cfg.schedule_kw:
            if k not in cls.options:
                raise ValueError(f"schedule_kw {k!r} is not an option of schedule {cls.name!r} "
                                 f"(options: {', '.join(cls.options)})")
        for arg, value, default in (("averaging", cfg.averaging, "none"), ("attack", cfg.attack, "none"),
                                    ("sync", cfg.sync, "allreduce")):
            if value != default:
                raise ValueError(f"schedule={cls.name!r} exchanges gradients on its own thread; "
                                 f"it needs {arg}={default!r}, got {value!r}")
        if cfg.aggregator not in ("auto", "allreduce", "compressed"):
            raise ValueError(f"schedule={cls.name!r} reduces slice by slice: aggregator must be "
                             f"'allreduce' or 'compressed' (a codec), got {cfg.aggregator!r}")

    def __init__(self, engine, slice_size: int | None = None, timeline: bool = False,
                 in_flight: int = IN_FLIGHT, coalesce: int | None = None, calls: str = "auto",
                 head: int = P3_SLICE_SIZE, realtime: bool = True, flat: bool = True,
                 arrival: str = "last", ready_at: tuple | None = None):
        super().__init__(engine)
        e = engine
        self.calls, self.realtime = calls, realtime  # types and ranges: checked from the declaration
        if slice_size is not None:
            self.slice_size = slice_size
        # messages up to one slice (whole-layer schedules: up to P3's slice size, like DDP's buckets)
        self.coalesce = coalesce if coalesce is not None else (self.slice_size or P3_SLICE_SIZE)
        self.in_flight, self.timeline = in_flight, bool(timeline)
        self.layers, sites = self._trace()
        sizes = [sum(p.numel() for p in ps) for _, ps in self.layers]
        self.flat = flatten(self.layers) if flat else None
        self.units = make_units(sizes, self.slice_size)
        self._index = {u: i for i, u in enumerate(self.units)}
        self.n_head = head_layers(sizes, head)
        # one optimizer per layer, so a layer is updated the moment its gradient is back
        opt = e.optimizer
        self.opts = [type(opt)(ps, **opt.defaults) for _, ps in self.layers]
        # the thread's Collective: same group, network and ledger records; its own step
        # counter; a link clock instead of sleeping (the ledger's modeled time; on a kernel
        # link also the latency it adds)
        self.comm = copy.copy(e.comm)
        self.comm.ledger = CommLedger(records=e.comm.ledger.records)
        self.comm.clock = LinkClock(in_flight)
        self._free, self._ends, self._costs = 0.0, [], {}   # the emulated link (exchange.py)
        self._rate = ("allreduce", 4)      # op and bytes per value of the last real call
        e.aggregator.comm = self.comm
        emulated = (e.cfg.network is not None or e.cfg.network_schedule is not None) \
            and e.comm.link == "model"
        board = stamps.board(e.comm) if arrival == "last" and emulated else None
        self.stamps = board.channel(len(self.layers)) if board is not None else None
        if ready_at is not None and len(ready_at) != len(self.layers):
            raise ValueError(f"ready_at must give one time per layer ({len(self.layers)}), "
                             f"got {len(ready_at)}")
        # a given profile makes the plan a function of the arguments alone (tests, replays)
        self.ready_at = [float(t) for t in ready_at] if ready_at is not None else self._profile()
        self._plans: dict = {}
        self.link_busy, self.thread_s, self.messages, self.n_calls = 0.0, 0.0, 0, 0
        self.rt = realtime and realtime_gloo()
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

    def mode(self, network: Network | None) -> str:
        """How the real bytes travel on ``network``: ``calls``, with ``auto`` resolved."""
        if self.calls != "auto":
            return self.calls
        if network is None:
            return "plan"
        return "message" if self.engine.comm.link == "kernel" else "head"

    def plan(self, network: Network | None) -> tuple[list[list[int]], list[list[int]]]:
        """On ``network``: the messages (lists of unit indices, in issue order) and the real
        calls that carry them (lists of message indices); cached, the same on every rank."""
        if network not in self._plans:
            net, p = network or LOOPBACK, self.engine.world_size
            xfer = [net.time("allreduce", 4 * u.numel, p) for u in self.units]
            order = issue_order(self.units, self.ready_at, xfer, self.priority)
            msgs = coalesce(self.units, order, self.ready_at, xfer, self.coalesce)
            mode = self.mode(network)
            if mode == "step":
                calls = [list(range(len(msgs)))]
            elif mode == "message":
                calls = [[k] for k in range(len(msgs))]
            elif mode == "head":
                calls = head_calls(self.units, msgs, self.n_head)
            else:
                real = [LOOPBACK.time("allreduce", 4 * u.numel, p)
                        - LOOPBACK.time("allreduce", 0, p)
                        for u in self.units]   # bytes only: the call pays one real latency
                calls = batches(self.units, msgs, self.ready_at, xfer, real)
            self._plans[network] = msgs, calls
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
        self._keep_views()
        self._left = [len(ps) for _, ps in self.layers]
        self._step = step
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
                "thread_s": self.thread_s - thread0,   # the last exchange's messages and calls
                "messages": self.messages or len(plan[0]), "calls": self.n_calls or len(plan[1])}
        if self.timeline:
            info["events"], self.events = self.events, []
        return StepResult(float(loss.detach()), wall - exposed, exposed, comm_s=exposed,
                          codec_s=0.0, info=info)

    def _keep_views(self) -> None:
        """Gradients stay views of the flat buffer (a caller that set them to None, or swapped
        them, gets them back in it)."""
        if self.flat is None:
            return
        buf, spans = self.flat
        for (_, ps), (a, _) in zip(self.layers, spans):
            for p in ps:
                if p.grad is None or not is_view(p.grad, buf):
                    g = buf[a:a + p.numel()].view_as(p)
                    g.copy_(p.grad) if p.grad is not None else g.zero_()
                    p.grad = g
                a += p.numel()

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


def realtime_gloo() -> bool:
    """gloo's threads at real-time priority (:mod:`lab.schedule.realtime`)."""
    return realtime.promote_gloo()
