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

from ..argspec import Arg, takes
from .base import register
from .server import ServerMode


@register("ssp")
@takes(staleness=Arg(int, ge=0, also=(math.inf, "inf", "infinity"),
                     help="clocks a worker may run ahead of the slowest (inf: ASP)"))
class SSP(ServerMode):
    name = "ssp"

    def __init__(self, workers: int, staleness: float = 3):
        super().__init__(workers)
        self.s = math.inf if isinstance(staleness, str) else staleness  # "inf": declared
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
