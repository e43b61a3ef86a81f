"""The two ablations of P3 (Jayarajan et al., SysML 2019, Section 5.4): each keeps one of its
two ideas. ``slicing-only`` cuts layers into slices but sends them in backward (FIFO) order;
``priority-only`` sends whole layers, the one nearest the input first among those ready."""
from __future__ import annotations

from .base import register
from .overlap import Overlap
from .plan import P3_SLICE_SIZE


@register("slicing-only")
class SlicingOnly(Overlap):
    name = "slicing-only"
    slice_size = P3_SLICE_SIZE
    priority = False
    options = ("slice_size", *Overlap.options)


@register("priority-only")
class PriorityOnly(Overlap):
    name = "priority-only"
    slice_size = None
    priority = True
