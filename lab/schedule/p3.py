"""``p3``: Priority-based Parameter Propagation (Jayarajan, Wei, Gibson, Fedorova, Pekhimenko,
SysML 2019, Section 4).

(i) every layer is cut into slices of ``slice_size`` values (40,000 in the paper's MXNet code);
(ii) a slice has the priority of its layer in forward order, layer 0 highest; (iii) one sender
thread sends the highest-priority ready slice, so a slice produced late in backward overtakes
lower-priority slices still waiting (at slice granularity, never mid-slice); (v) the next
forward starts layer by layer as each layer's parameters are back. Our reading for an
allreduce world: collectives must be issued in the same order on every rank, so the priority
queue (:func:`lab.schedule.plan.issue_order`) runs on inputs every rank agrees on: ahead of
time where the real calls follow it, and on an emulated link on the last rank's ready times of
each step, which the link replays (:mod:`lab.schedule.exchange`); (iv), round-robin placement
over parameter servers, has no allreduce analogue (``sync="p3-ps"``, :mod:`lab.sync.p3_server`,
has it).
"""
from __future__ import annotations

from .base import register
from .overlap import Overlap
from .plan import P3_SLICE_SIZE


@register("p3")
class P3(Overlap):
    name = "p3"
    slice_size = P3_SLICE_SIZE
    priority = True
    options = ("slice_size", *Overlap.options)
