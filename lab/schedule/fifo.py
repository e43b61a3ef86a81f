"""``fifo``: each layer's gradient is exchanged as soon as backward produces it, in that order.

What Horovod and PyTorch DDP's gradient buckets do (our unit is one layer, not a byte-sized
bucket): communication overlaps the rest of the backward pass and the next forward pass, but
the last layers go first, so the next forward's first layer waits for the whole model
(Jayarajan et al., SysML 2019, Section 3, Figure 3: the "layer-wise FIFO" baseline).
"""
from __future__ import annotations

from .base import register
from .overlap import Overlap


@register("fifo")
class Fifo(Overlap):
    name = "fifo"
    slice_size = None
    priority = False
