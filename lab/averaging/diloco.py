"""DiLoCo: H inner steps per worker, then an outer step on the averaged parameter change.

Douillard, Feng, Rusu, Chhaparia, Donchev, Kuncoro, Ranzato, Szlam, Shen, "DiLoCo: Distributed
Low-Communication Training of Language Models", arXiv 2311.08105 (2023), Algorithm 1. Every
replica starts an outer round from the same global parameters theta; each takes H steps of its
inner optimizer on its own data; then

    Delta = (1/k) sum_i (theta - theta_i)          (the outer gradient: one allreduce)
    theta <- OuterOpt(theta, Delta)                 (Nesterov momentum, lr 0.7, momentum 0.9)

and every replica restarts from the new theta. The inner optimizer keeps its state across
rounds (the paper does not reset AdamW). The outer optimizer is written out here (PyTorch's
``SGD(nesterov=True)`` rule, buffer b: b <- mu b + Delta; theta <- theta - lr (Delta + mu b)),
so that its buffer is plain state a checkpoint captures.

Deviations: the inner optimizer is the config's (``sgd`` or ``adam``; the paper's AdamW is
``optimizer="adam"`` with ``weight_decay``, which is Adam's L2 form, not decoupled decay);
a run whose last step is not an outer step ends on the global theta of the last outer step
(:meth:`finish`), the unsynchronised inner steps dropped. With H = 1, outer lr 1 and no
momentum, theta <- mean_i theta_i: model averaging every step (local SGD with period 1).
torchft's ``DiLoCo`` and Prime Intellect's OpenDiLoCo were read for understanding only.
"""
from __future__ import annotations

import torch

from ..argspec import Arg, takes
from .base import Averaging, register
from .params import flat, load

OUTER = dict(period=Arg(int, ge=1, help="inner steps per outer step (H)"),
             outer_lr=Arg(float, gt=0, help="outer learning rate (paper: 0.7)"),
             outer_momentum=Arg(float, ge=0, lt=1, help="outer momentum (paper: 0.9)"),
             nesterov=Arg(bool, help="Nesterov momentum (paper) or heavy ball"))


class OuterSGD:
    """The outer optimizer on a flat vector: SGD with (Nesterov) momentum, PyTorch's rule,
    applied to the slice ``sl`` of ``theta`` (a fragment, or all of it)."""

    def __init__(self, numel: int, lr: float, momentum: float, nesterov: bool):
        self.lr, self.momentum, self.nesterov = lr, momentum, nesterov
        self.buf = torch.zeros(numel)  # b_0 = 0 makes the first step b = Delta, as torch does

    @torch.no_grad()
    def step(self, theta: torch.Tensor, delta: torch.Tensor, sl: slice = slice(None)) -> None:
        if not torch.isfinite(delta).all():
            raise FloatingPointError("diloco: non-finite outer gradient")
        d = delta
        if self.momentum:
            b = self.buf[sl]
            b.mul_(self.momentum).add_(delta)
            d = delta + self.momentum * b if self.nesterov else b
        theta[sl].sub_(d, alpha=self.lr)


@register("diloco")
@takes(**OUTER)
class DiLoCo(Averaging):
    name = "diloco"

    def __init__(self, engine, period: int = 50, outer_lr: float = 0.7,
                 outer_momentum: float = 0.9, nesterov: bool = True):
        super().__init__(engine)
        self.period = period
        self.theta = flat(engine.params)  # the global parameters, identical on every rank
        self.outer = OuterSGD(self.theta.numel(), outer_lr, outer_momentum, nesterov)
        self.synced = True  # whether the replica sits on theta (no inner step since the sync)

    def exchange_gradients(self, step):
        return False  # inner steps are local

    def outer_at(self, step: int) -> bool:
        """Whether an outer step follows ``step`` (0-based)."""
        return (step + 1) % self.period == 0

    @torch.no_grad()
    def after_step(self, step):
        e = self.engine
        self.synced = False
        if not self.outer_at(step):
            return {"outer": 0.0}
        delta = self.theta - flat(e.params)
        if not torch.isfinite(delta).all():
            raise FloatingPointError(f"rank {e.rank}: non-finite parameters before the outer step")
        e.comm.allreduce(delta, tag="outer")
        delta.div_(e.world_size)
        self.outer.step(self.theta, delta)
        load(e.params, self.theta)
        self.synced = True
        return {"outer": 1.0}

    def finish(self):
        if not self.synced:  # the model is the global theta of the last outer step
            load(self.engine.params, self.theta)
