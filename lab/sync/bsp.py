"""``bsp``: bulk synchronous parallel on a parameter server (Valiant, CACM 1990).

A barrier every step: the server waits for one gradient from each of the ``n`` workers, applies
their mean in one optimizer step and only then answers them all with the new parameters. Every
worker computes on the same model, so the run equals synchronous data parallelism with an
allreduce on the same global batch (tested to rel 1e-5), and each step lasts as long as the
slowest worker's.
"""
from __future__ import annotations

from .base import register
from .server import ServerMode


@register("bsp")
class BSP(ServerMode):
    name = "bsp"
    resumable = True  # at a step boundary every grant can be made anew

    def __init__(self, workers: int):
        super().__init__(workers)
        self.round: dict[int, object] = {}

    def on_push(self, srv, w, grad, version):
        self.round[w] = grad
        if len(self.round) == self.n:  # the barrier: the last gradient of the step is in
            srv.apply([self.round[k] for k in sorted(self.round)], 1.0 / self.n)
            self.round.clear()
            for k in range(1, self.n + 1):
                srv.release(k)
        return True
