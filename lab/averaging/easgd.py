"""Elastic averaging SGD (EASGD), synchronous form with a replicated center.

Zhang, Choromanska, LeCun, "Deep learning with Elastic Averaging SGD", NeurIPS 2015. Workers
x_i and a center x~ are tied by an elastic force of strength rho; with alpha = lr * rho, every
``period`` (tau) steps (Algorithm 1, applied to all workers at once as in Eq. 5-6):

    x_i <- x_i - alpha (x_i - x~)          for every worker i
    x~  <- x~  + alpha sum_i (x_i - x~)    (with the x_i before their own move)

Between those moments each worker runs SGD on its own gradients. The paper keeps x~ on a
parameter server; here every rank keeps an identical copy of x~ and the sum is one allreduce
of the differences x_i - x~ (same bytes as a parameter average, no extra rank). ``beta`` =
p * alpha is the paper's moving rate (it uses beta = 0.9); give ``rho`` or ``beta``, not both.
The center must move by a convex combination, so p * alpha <= 1 is required.

The result is the center: :meth:`finish` loads x~ into the model before the final
evaluation. Intermediate evaluations on rank 0 show worker 0, an explorer.
"""
from __future__ import annotations

import torch

from .base import Averaging, register
from .params import flat, load, positive_int


@register("easgd")
class EASGD(Averaging):
    name = "easgd"

    def __init__(self, engine, period: int = 4, rho: float | None = None,
                 beta: float | None = None):
        super().__init__(engine)
        self.period = positive_int("period", period)
        self.alpha = self.moving_rate(engine.cfg.lr, engine.world_size, rho, beta)
        self.center = flat(engine.params)  # every replica starts from the same point

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
        kw = cfg.averaging_kw
        cls.moving_rate(cfg.lr, workers, kw.get("rho"), kw.get("beta"))
        positive_int("period", kw.get("period", 4))

    def exchange_gradients(self, step):
        return False

    @torch.no_grad()
    def after_step(self, step):
        if (step + 1) % self.period:
            return {"distance_to_center": float("nan")}
        e = self.engine
        diff = flat(e.params) - self.center
        if not torch.isfinite(diff).all():
            raise FloatingPointError(f"rank {e.rank}: non-finite parameters in EASGD")
        distance = float(diff.norm())
        total = diff.clone()
        e.comm.allreduce(total, tag="elastic")          # sum_i (x_i - x~)
        load(e.params, self.center + (1 - self.alpha) * diff)   # x_i - alpha (x_i - x~)
        self.center.add_(total, alpha=self.alpha)
        return {"distance_to_center": distance}

    def finish(self):
        load(self.engine.params, self.center)
