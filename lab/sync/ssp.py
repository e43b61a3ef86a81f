"""``ssp``: stale synchronous parallel (Ho et al., "More effective distributed ML via a stale
synchronous parallel parameter server", NeurIPS 2013, sec. 2).

Worker ``i``'s clock ``c_i`` counts the gradients it has pushed. The server applies each
gradient on arrival (as ``asp``) but gives a worker new parameters, i.e. lets it start its next
step, only while ``c_i - min_j c_j <= s`` (eq. ``eq-ssp-bound``); otherwise the worker waits
until the slowest catches up. ``s = 0`` is BSP (same sequence of models for plain SGD, since all
gradients of a step are computed on the same parameters), ``s = inf`` is ASP. Our reading: the
paper's workers read a cache that may be up to ``s`` clocks stale; here every read is the
server's freshest model, which satisfies the same bound.
"""
from __future__ import annotations

import math

from .base import register
from .server import ServerMode


@register("ssp")
class SSP(ServerMode):
    name = "ssp"

    def __init__(self, workers: int, staleness: float = 3):
        super().__init__(workers)
        if isinstance(staleness, str) and staleness.lower() in ("inf", "infinity"):
            staleness = math.inf
        if isinstance(staleness, bool) or not isinstance(staleness, (int, float)) \
                or math.isnan(staleness) or staleness < 0 \
                or (staleness != math.inf and staleness != int(staleness)):
            raise ValueError(f"staleness must be an int >= 0 or inf, got {staleness!r}")
        self.s = staleness
        self.waiting: list[int] = []

    def on_push(self, srv, w, grad, version):
        srv.apply([grad], 1.0 / self.n)
        self.waiting.append(w)
        # answer, oldest first, every waiting worker the bound now lets start (all of them once
        # every gradient is granted: they are told to stop)
        for k in list(self.waiting):
            if srv.granted >= srv.limit or srv.clock[k] - srv.slowest() <= self.s:
                self.waiting.remove(k)
                srv.release(k)
        return True
