"""Local SGD (periodic model averaging) and post-local SGD.

Each rank takes ``period`` = H optimizer steps on its own gradients, then the replicas are
replaced by their mean (one allreduce of the parameters): McDonald, Hall, Mann, "Distributed
training strategies for the structured perceptron", NAACL 2010 (iterative parameter mixing);
Miao et al. 2014; the "local SGD" of Stich, ICLR 2019. Communication falls to 1/H of
synchronous data parallelism, since a parameter vector is as large as a gradient.

Post-local SGD (Lin, Stich, Patel, Jaggi, "Don't use large mini-batches, use local SGD",
ICLR 2020, Section 3): synchronous gradient averaging for the first ``warmup`` steps, then
local SGD. PyTorch ships the same idea as ``PostLocalSGDOptimizer``.

Only parameters are averaged; momentum buffers stay local (see :mod:`lab.averaging.params`).
With H = 1 and plain SGD this is exactly synchronous SGD: the mean of x - lr g_i is
x - lr mean(g_i).
"""
from __future__ import annotations

from ..argspec import Arg, takes
from .base import Averaging, register
from .params import average


@register("local")
@takes(period=Arg(int, ge=1, help="local steps between averages (H)"),
       warmup=Arg(int, ge=0, help="synchronous steps first (post-local SGD)"))
class LocalSGD(Averaging):
    name = "local"

    def __init__(self, engine, period: int = 8, warmup: int = 0):
        super().__init__(engine)
        self.period, self.warmup = period, warmup

    def exchange_gradients(self, step):
        return step < self.warmup  # the dense warm-up of post-local SGD

    def averages_at(self, step: int) -> bool:
        """Whether the replicas are averaged after ``step`` (0-based)."""
        return step >= self.warmup and (step + 1 - self.warmup) % self.period == 0

    def after_step(self, step):
        synced = step < self.warmup or self.averages_at(step)
        if self.averages_at(step):
            average(self.engine, tag="params")
        return {"averaged": float(synced)}
