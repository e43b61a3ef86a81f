"""Elastic averaging SGD (EASGD), synchronous form with a replicated center.

Zhang, Choromanska, LeCun, "Deep learning with Elastic Averaging SGD", NeurIPS 2015. Workers
x_i and a center x~ are tied by an elastic force of strength rho; with alpha = lr * rho, the
synchronous update (Eq. 5-6) takes the gradient step and both elastic terms from the SAME old
values x_i^t, x~^t:

    x_i^{t+1} = x_i^t - lr g_i(x_i^t) - alpha (x_i^t - x~^t)              (Eq. 5)
    x~^{t+1}  = x~^t  + alpha sum_i (x_i^t - x~^t)                        (Eq. 6)

With a communication period ``period`` = tau the elastic terms act only on steps t with
tau | t (Algorithm 1; its first one, t = 0, moves nothing since x_i = x~, but it is sent, so a
run of T steps makes ceil(T / tau) exchanges); the other steps are plain local SGD.

``order="pull_after_step"`` keeps the sequential variant (not the paper's): on steps with
tau | t + 1, the worker first takes its gradient step and is then pulled from the *new* point,
x_i <- (x_i^t - lr g) - alpha ((x_i^t - lr g) - x~), and the center moves with those new values.
Equivalently, the next step's gradient is taken at the pulled point rather than beside it.

The paper keeps x~ on a parameter server; here every rank keeps an identical copy of x~ and the
sum is one allreduce of the differences x_i - x~ (same bytes as a parameter average, no extra
rank). ``beta`` = p * alpha is the paper's moving rate (it uses beta = 0.9); give ``rho`` or
``beta``, not both. The center must move by a convex combination, so p * alpha <= 1 is required.
With momentum, "lr g" is the optimizer's step and the elastic term is added after it.

The result is the center: :meth:`finish` loads x~ into the model before the final
evaluation. Intermediate evaluations on rank 0 show worker 0, an explorer.
"""
from __future__ import annotations

import torch

from ..argspec import Arg, takes
from .base import Averaging, register
from .params import flat, load

ORDERS = ("paper", "pull_after_step")


@register("easgd")
@takes(period=Arg(int, ge=1, help="steps between elastic exchanges (tau)"),
       rho=Arg(float, gt=0, none=True, help="elastic force (alpha = lr * rho)"),
       beta=Arg(float, gt=0, le=1, none=True, help="moving rate p * alpha (default 0.9)"),
       order=Arg(str, choices=ORDERS, help="the paper's update or the sequential variant"),
       rule=lambda a: "give rho or beta, not both"
       if a["rho"] is not None and a["beta"] is not None else None)
class EASGD(Averaging):
    name = "easgd"

    def __init__(self, engine, period: int = 4, rho: float | None = None,
                 beta: float | None = None, order: str = "paper"):
        super().__init__(engine)
        self.period = period
        self.alpha = self.moving_rate(engine.cfg.lr, engine.world_size, rho, beta)
        self.order = order
        self.center = flat(engine.params)  # every replica starts from the same point
        # paper order: x_i^t - x~^t as step t began (zero at t = 0)
        self.start_diff = torch.zeros_like(self.center)

    @staticmethod
    def moving_rate(lr: float, workers: int, rho=None, beta=None) -> float:
        """alpha = lr * rho, or beta / p; refuses values that make the center diverge."""
        if rho is not None and beta is not None:
            raise ValueError("easgd: give rho or beta, not both")
        if rho is None and beta is None:
            beta = 0.9
        if rho is not None:
            if isinstance(rho, bool) or not isinstance(rho, (int, float)) or not rho > 0:
                raise ValueError(f"easgd: rho must be a number > 0, got {rho!r}")
            alpha = lr * rho
        else:
            if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not 0 < beta <= 1:
                raise ValueError(f"easgd: beta must be in (0, 1], got {beta!r}")
            alpha = beta / workers
        if not workers * alpha <= 1 + 1e-12:
            raise ValueError(f"easgd: p * alpha = {workers} * {alpha:g} > 1 (alpha = lr * rho): "
                             f"the center would overshoot; lower rho")
        return alpha

    @classmethod
    def check(cls, cfg, workers):
        kw = cfg.averaging_kw  # types and ranges: checked from the declaration already
        cls.moving_rate(cfg.lr, workers, kw.get("rho"), kw.get("beta"))

    def exchange_gradients(self, step):
        return False

    def exchanges_at(self, step: int) -> bool:
        """Whether the elastic terms act on ``step`` (0-based)."""
        return (step if self.order == "paper" else step + 1) % self.period == 0

    @torch.no_grad()
    def after_step(self, step):
        e = self.engine
        out = {"distance_to_center": float("nan")}
        if self.exchanges_at(step):
            # paper: the values before this step's gradient step; variant: the values after it
            diff = self.start_diff if self.order == "paper" else flat(e.params) - self.center
            if not torch.isfinite(diff).all():
                raise FloatingPointError(f"rank {e.rank}: non-finite parameters in EASGD")
            out["distance_to_center"] = float(diff.norm())
            total = diff.clone()
            e.comm.allreduce(total, tag="elastic")              # sum_i (x_i - x~)
            load(e.params, flat(e.params) - self.alpha * diff)  # Eq. 5's elastic term
            self.center.add_(total, alpha=self.alpha)           # Eq. 6
        if self.order == "paper" and self.exchanges_at(step + 1):
            # x_i^{t+1} as the next step will begin: with averaging, only the sync schedule
            # runs, and it changes the parameters only in its optimizer step
            self.start_diff = flat(e.params) - self.center
        return out

    def finish(self):
        load(self.engine.params, self.center)
