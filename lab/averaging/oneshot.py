"""One-shot averaging: every rank trains on its own data, the models are averaged once.

Zinkevich, Weimer, Smola, Li, "Parallelized stochastic gradient descent", NeurIPS 2010
(Algorithm 2, SimuParallelSGD): k machines run SGD independently on their share of the data
and the final parameters are averaged. One allreduce of the parameters for the whole run,
in :meth:`finish`, before the final evaluation. Rank 0's intermediate evaluations show its
own replica, not the average.
"""
from __future__ import annotations

from .base import Averaging, register
from .params import average


@register("oneshot")
class OneShot(Averaging):
    name = "oneshot"

    def exchange_gradients(self, step):
        return False

    def finish(self):
        average(self.engine, tag="params")
