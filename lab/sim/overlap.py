"""Exposed communication of a schedule: sync, fifo (wait-free backprop), p3, local SGD's period.

``sync`` exchanges after backward: all of it is exposed. ``fifo`` (wait-free backpropagation,
Zhang et al., USENIX ATC 2017: each layer's gradient sent as soon as backward produces it) and
``p3`` (Jayarajan et al., SysML 2019, Sec. 4: slices of 40,000 values, sent by forward-order
priority, so the next forward starts on the first layers early) are priced by Part 7's own
planner, ``lab.schedule.plan.predict``, on the cluster's effective link: the same event
model the P3 engine issues by. Per-layer compute is split in proportion to the layers' values
(forward a third, backward two thirds of the step's compute).
"""
from __future__ import annotations

import math

from ..comm import Network
from .network import Cluster


def layer_times(sizes, compute_s: float, backward_share: float = 2 / 3):
    """(forward seconds per layer, gradient-ready offset per layer from backward's start):
    compute split by the layers' values, backward running from the last layer to the first."""
    total = float(sum(sizes)) or 1.0
    fwd = [compute_s * (1 - backward_share) * s / total for s in sizes]
    bwd = [compute_s * backward_share * s / total for s in sizes]
    ready, t = [0.0] * len(sizes), 0.0
    for i in reversed(range(len(sizes))):
        t += bwd[i]
        ready[i] = t
    return fwd, ready


def effective_network(c: Cluster) -> Network:
    """The flat link an overlapping schedule's planner prices on: the cluster's alpha and its
    allreduce bandwidth (NIC rate times the measured efficiency)."""
    return Network(latency=c.alpha, bandwidth=1.0 / c.beta("allreduce"))


def overlapped_step(schedule: str, sizes, compute_s: float, c: Cluster) -> float:
    """Seconds per step of ``schedule`` ('fifo' or 'p3') with per-rank compute ``compute_s``."""
    from ..schedule.plan import predict
    if schedule not in ("fifo", "p3"):
        raise ValueError(f"schedule must be 'fifo' or 'p3', got {schedule!r}")
    if c.ranks < 2:
        return compute_s
    fwd, ready = layer_times(sizes, compute_s)
    step = predict(list(sizes), fwd, ready, schedule, effective_network(c), c.ranks)
    return max(step, compute_s) if math.isfinite(step) else step
