"""Slices and the order they go on the wire: pure functions, the same on every rank.

P3 (Jayarajan et al., "Priority-based Parameter Propagation for Distributed DNN Training",
SysML 2019, Section 4) cuts every layer into slices of a fixed number of values (40,000 by
default in its MXNet code), gives each slice the priority of its layer in *forward* order
(layer 0 highest) and sends from a priority queue, so a high-priority slice produced late in
backward overtakes lower-priority slices still waiting, at slice granularity.

The trap (gloo and NCCL match collectives by issue order): a priority queue popped as gradients
happen to arrive pops in different orders on different ranks, which deadlocks or sums the wrong
slices. Our reading: we run that priority queue *ahead of time*, in :func:`issue_order`, on
inputs every rank agrees on (when each layer's gradient is ready, all ranks' maximum; the
modeled transfer time of each slice). Every rank then issues the same sequence and only waits
for its own gradients; timing noise can delay a slice, never reorder it.
"""
from __future__ import annotations

import heapq
from typing import NamedTuple, Sequence

P3_SLICE_SIZE = 40_000  # values per slice in P3's reference implementation
#: messages on the wire at once by default: the next one's latency overlaps the bytes of the one
#: before it, as ps-lite's sender does (it never waits for a reply before sending the next)
IN_FLIGHT = 2


class Unit(NamedTuple):
    """One communication unit: values ``[start, stop)`` of layer ``layer``'s flat gradient."""

    layer: int   # forward position of the layer (0 = first): its priority in P3
    start: int
    stop: int

    @property
    def numel(self) -> int:
        return self.stop - self.start


def check_slice_size(slice_size) -> None:
    if isinstance(slice_size, bool) or not isinstance(slice_size, int) or slice_size < 1:
        raise ValueError(f"slice_size must be a positive int (values per slice), got {slice_size!r}")


def check_in_flight(in_flight) -> None:
    if isinstance(in_flight, bool) or not isinstance(in_flight, int) or in_flight < 1:
        raise ValueError(f"in_flight must be a positive int (exchanges on the wire at once), "
                         f"got {in_flight!r}")


def make_units(layer_sizes: Sequence[int], slice_size: int | None) -> list[Unit]:
    """Every layer whole (``slice_size=None``) or cut into slices of ``slice_size`` values;
    the units cover every value of every layer exactly once, in forward order."""
    if slice_size is not None:
        check_slice_size(slice_size)
    units = []
    for layer, n in enumerate(layer_sizes):
        step = n if slice_size is None else slice_size
        units += [Unit(layer, a, min(a + step, n)) for a in range(0, n, max(step, 1))]
    return units


def issue_order(units: Sequence[Unit], ready: Sequence[float], xfer: Sequence[float],
                priority: bool) -> list[int]:
    """The order in which a single sender thread would issue ``units``.

    ``ready[l]``: when layer ``l``'s gradient is ready (seconds after backward starts);
    ``xfer[i]``: how long unit ``i`` occupies the link. The sender is never idle while something
    is ready; among ready units it picks the highest priority (smallest layer, then offset) if
    ``priority``, else the earliest ready (FIFO: backward order, then offset). Units are never
    preempted mid-transfer: preemption happens at unit (slice) granularity, as in P3.
    """
    if len(xfer) != len(units):
        raise ValueError(f"xfer must have one time per unit ({len(units)}), got {len(xfer)}")
    arrivals = sorted(range(len(units)), key=lambda i: (ready[units[i].layer], -units[i].layer,
                                                        units[i].start))

    def key(i):
        u = units[i]
        return (u.layer, u.start) if priority else (ready[u.layer], -u.layer, u.start)

    order, heap, t, nxt = [], [], 0.0, 0
    while len(order) < len(units):
        if not heap:  # idle link: jump to the next arrival
            t = max(t, ready[units[arrivals[nxt]].layer])
        while nxt < len(arrivals) and ready[units[arrivals[nxt]].layer] <= t:
            heapq.heappush(heap, (key(arrivals[nxt]), arrivals[nxt]))
            nxt += 1
        _, i = heapq.heappop(heap)
        order.append(i)
        t += xfer[i]
    return order


def coalesce(units: Sequence[Unit], order: Sequence[int], ready: Sequence[float],
             xfer: Sequence[float], limit: int) -> list[list[int]]:
    """Group ``order`` into messages, each one collective: a unit joins the message before it
    while together they hold at most ``limit`` values and its layer is ready (by ``ready``) when
    that message would go out. Small layers (biases, convolutions) then share one latency, as
    in DDP's gradient buckets; a slice of ``limit`` values always travels alone. ``limit=0``:
    one unit per message (P3's reference code, which sends every slice on its own)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"coalesce must be an int >= 0 (values per message; 0: off), got {limit!r}")
    msgs, t = [], 0.0
    for i in order:
        u = units[i]
        if msgs and limit:
            m = msgs[-1]
            if sum(units[j].numel for j in m[0]) + u.numel <= limit and ready[u.layer] <= m[1]:
                m[0].append(i)
                t += xfer[i]
                continue
        go = max(t, ready[u.layer])
        msgs.append(([i], go))
        t = go + xfer[i]
    return [m for m, _ in msgs]


def batches(units: Sequence[Unit], msgs: Sequence[Sequence[int]], ready: Sequence[float],
            xfer: Sequence[float], real: Sequence[float]) -> list[list[int]]:
    """Group consecutive messages into *real* calls: a message joins the call before it if the
    wait for its layers (planned ready at ``ready``) after the call's first message's, plus the
    call's real cost (``real[i]``, unit ``i`` on the machine's own link; one real latency per
    call), stays within the first message's emulated time (``xfer``, per unit), so the real call
    does not delay the first message's delivery by the plan. Every message keeps its own place and latency on
    the emulated link (:class:`lab.comm.network.LinkClock` books each); only the real bytes
    travel together, so a step pays the machine's per-call cost (a rendezvous of every rank's
    communication thread) a few times instead of once per slice. A pure function of the plan:
    the same on every rank."""
    calls = []
    for k, msg in enumerate(msgs):
        r = max(ready[units[i].layer] for i in msg)
        if calls:
            call, r0, budget, cost = calls[-1]
            add = sum(real[i] for i in msg)
            if max(0.0, r - r0) + cost + add <= budget:
                call.append(k)
                calls[-1][3] = cost + add
                continue
        calls.append([[k], r, sum(xfer[i] for i in msg), sum(real[i] for i in msg)])
    return [c[0] for c in calls]


def head_layers(sizes: Sequence[int], head: int) -> int:
    """How many of the first layers (forward order) fit in ``head`` values: the layers the next
    forward needs first, whose bytes the overlap engine moves in a call of their own (at least
    layer 0; none if ``head`` is 0)."""
    n, total = 0, 0
    for size in sizes:
        if total + size > head and (n or not head):
            break
        total, n = total + size, n + 1
    return n


def head_calls(units: Sequence[Unit], msgs: Sequence[Sequence[int]], n_head: int) -> list[list[int]]:
    """Real calls for an emulated link: first the messages that carry any of the first
    ``n_head`` layers, then all the others, each group in the plan's order. The emulated link
    still carries every message at its own time; only the real bytes of the first layers, which
    the next forward needs first, no longer wait for the whole model's."""
    head = [k for k, m in enumerate(msgs) if any(units[i].layer < n_head for i in m)]
    rest = [k for k in range(len(msgs)) if k not in set(head)]
    return [c for c in (head, rest) if c]


def predict(sizes: Sequence[int], fwd: Sequence[float], ready: Sequence[float], schedule: str,
            network, world_size: int, slice_size: int | None = None, in_flight: int = IN_FLIGHT,
            coalesce_values: int | None = None) -> float:
    """Predicted seconds per step of ``schedule`` for a model with layer ``sizes`` (values, in
    forward order), per-layer forward times ``fwd`` and gradient-ready offsets ``ready``, on
    ``network`` (a :class:`lab.comm.Network` or its spec) with ``world_size`` ranks: ``sync`` is
    compute plus one allreduce of the whole model; the others are :func:`predict_step` with the
    schedule's units, order and messages. The one prediction the book and the benchmark use."""
    from ..comm import Network  # planning is pure; the link only supplies alpha and beta
    from .base import REGISTRY
    net = Network.parse(network)
    fwd, ready = [float(v) for v in fwd], [float(v) for v in ready]
    total = 4 * sum(sizes)
    if schedule == "sync":
        return sum(fwd) + max(ready) + net.time("allreduce", total, world_size)
    cls = REGISTRY.get(schedule)
    units = make_units(sizes, slice_size if slice_size is not None else cls.slice_size)
    xfer = [net.time("allreduce", 4 * u.numel, world_size) for u in units]
    order = issue_order(units, ready, xfer, cls.priority)
    limit = coalesce_values  # default as the engine's: one slice, or P3's for whole layers
    if limit is None:
        limit = slice_size or cls.slice_size or P3_SLICE_SIZE
    msgs = coalesce(units, order, ready, xfer, limit)
    lat = net.time("allreduce", 0, world_size)
    mx = [net.time("allreduce", 4 * sum(units[i].numel for i in m), world_size) for m in msgs]
    return predict_step(fwd, ready, units, msgs, mx, in_flight=in_flight, latency=[lat] * len(msgs))


def predict_step(fwd: Sequence[float], ready: Sequence[float], units: Sequence[Unit],
                 order: Sequence, xfer: Sequence[float], steps: int = 6,
                 in_flight: int = 1, latency: Sequence[float] | None = None) -> float:
    """Steady-state seconds per step of an overlapping schedule on the alpha-beta clock.

    ``fwd[l]``: forward time of layer ``l``; ``ready[l]``: when its gradient is ready, seconds
    after backward starts (the last one also ends backward). Each step's forward starts layer
    ``l`` at ``f_l = max(f_{l-1} + fwd[l-1], a_l)``, with ``a_l`` the time the previous
    exchange finished layer ``l`` (the overview's forward-start equation); units go out in
    ``order``, each when its layer is ready and fewer than ``in_flight`` units are on the wire.
    Alone, unit ``i`` takes ``xfer[i]``; in flight together, its ``latency[i]`` (the part of
    ``xfer[i]`` that is not bytes; default 0) overlaps the transfers before it, while its bytes
    queue behind theirs: the link model of :class:`lab.comm.LinkClock`. An entry of ``order``
    may be a list of unit indices, one message (:func:`coalesce`): ``xfer`` and ``latency`` are
    then indexed by message, and it goes out when its last layer is ready.
    """
    check_in_flight(in_flight)
    lat = [0.0] * len(xfer) if latency is None else latency
    n = len(fwd)
    arrive, link, ends, starts = [0.0] * n, 0.0, [], []
    for _ in range(steps):
        t = arrive[0]
        starts.append(t)
        for layer in range(n):
            t = max(t, arrive[layer]) + fwd[layer]
        back = t
        left = [0] * n
        for u in units:
            left[u.layer] += 1
        for k, msg in enumerate(order):
            if not isinstance(msg, (list, tuple)):  # one unit: xfer and latency by unit index
                k, msg = msg, [msg]
            go = max(ready[units[i].layer] for i in msg)
            issue = max(back + go, ends[-in_flight] if len(ends) >= in_flight else 0.0)
            link = max(issue + xfer[k], link + xfer[k] - lat[k])
            ends.append(link)
            for i in msg:
                left[units[i].layer] -= 1
                if left[units[i].layer] == 0:
                    arrive[units[i].layer] = link
        # the next forward cannot start before this backward has ended
        arrive[0] = max(arrive[0], back + max(ready))
    return starts[-1] - starts[-2]
