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


def predict_step(fwd: Sequence[float], ready: Sequence[float], units: Sequence[Unit],
                 order: Sequence[int], xfer: Sequence[float], steps: int = 6,
                 in_flight: int = 1, latency: Sequence[float] | None = None) -> float:
    """Steady-state seconds per step of an overlapping schedule on the alpha-beta clock.

    ``fwd[l]``: forward time of layer ``l``; ``ready[l]``: when its gradient is ready, seconds
    after backward starts (the last one also ends backward). Each step's forward starts layer
    ``l`` at ``f_l = max(f_{l-1} + fwd[l-1], a_l)``, with ``a_l`` the time the previous
    exchange finished layer ``l`` (the overview's forward-start equation); units go out in
    ``order``, each when its layer is ready and fewer than ``in_flight`` units are on the wire.
    Alone, unit ``i`` takes ``xfer[i]``; in flight together, its ``latency[i]`` (the part of
    ``xfer[i]`` that is not bytes; default 0) overlaps the transfers before it, while its bytes
    queue behind theirs: the link model of :meth:`lab.comm.Collective.allreduce_async`.
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
        for i in order:
            u = units[i]
            issue = max(back + ready[u.layer], ends[-in_flight] if len(ends) >= in_flight else 0.0)
            link = max(issue + xfer[i], link + xfer[i] - lat[i])
            ends.append(link)
            left[u.layer] -= 1
            if left[u.layer] == 0:
                arrive[u.layer] = link
        # the next forward cannot start before this backward has ended
        arrive[0] = max(arrive[0], back + max(ready))
    return starts[-1] - starts[-2]
