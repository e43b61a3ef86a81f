"""``drop``: staleness drop, the 2022 survey's reading of Project Adam (Chilimbi et al., OSDI
2014; survey sec. 2.1).

Nobody waits. The server keeps a global clock (updates applied); a gradient computed on
parameters more than ``max_staleness`` updates old is discarded (counted in ``dropped``) and its
worker is simply refreshed with the current model; fresher gradients are applied as in ``asp``
(with ``lr / n``). Dropped gradients count as work done: the equal-work budget is gradients
*computed*.
"""
from __future__ import annotations

from .base import register
from .server import ServerMode


@register("drop")
class Drop(ServerMode):
    name = "drop"
    resumable = True  # at a step boundary every grant can be made anew

    def __init__(self, workers: int, max_staleness: int = 4):
        super().__init__(workers)
        if isinstance(max_staleness, bool) or not isinstance(max_staleness, int) \
                or max_staleness < 0:
            raise ValueError(f"max_staleness must be an int >= 0, got {max_staleness!r}")
        self.max_staleness = max_staleness

    def on_push(self, srv, w, grad, version):
        fresh = srv.version - version <= self.max_staleness
        if fresh:
            srv.apply([grad], 1.0 / self.n)
        srv.release(w)
        return fresh
