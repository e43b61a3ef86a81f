"""``drop``: staleness drop, the 2022 survey's reading of Project Adam (Chilimbi et al., OSDI
2014; survey sec. 2.1).

Nobody waits. The server keeps a global clock (updates applied); a gradient computed on
parameters more than ``max_staleness`` updates old is discarded (counted in ``dropped``) and its
worker is simply refreshed with the current model; fresher gradients are applied as in ``asp``
(with ``lr / n``). Dropped gradients count as work done: the equal-work budget is gradients
*computed*.
"""
from __future__ import annotations

from ..argspec import Arg, takes
from .base import register
from .server import ServerMode


@register("drop")
@takes(max_staleness=Arg(int, ge=0, help="updates a gradient may lag and still be applied"))
class Drop(ServerMode):
    name = "drop"
    resumable = True  # at a step boundary every grant can be made anew

    def __init__(self, workers: int, max_staleness: int = 4):
        super().__init__(workers)
        self.max_staleness = max_staleness

    def on_push(self, srv, w, grad, version):
        fresh = srv.version - version <= self.max_staleness
        if fresh:
            srv.apply([grad], 1.0 / self.n)
        srv.release(w)
        return fresh
