"""Centered clipping on worker momenta.

Karimireddy, He, Jaggi, "Learning from history for Byzantine robust optimization", ICML 2021.
Algorithm 2: every worker sends its momentum m_i = (1 - beta) g_i + beta m_i (the experiments
run beta in {0, 0.9, 0.99}; 0.9 is the default here), a Byzantine worker anything, and the
server aggregates the momenta with centered clipping (Eq. 2), iterating L = ``iters`` times from
the previous step's aggregate v_0:

    v_{l+1} = v_l + (1/n) sum_i (m_i - v_l) * min(1, tau / ||m_i - v_l||)

so no single vector moves the result by more than tau / n per iteration; the step is
x <- x - lr * v (by the config's optimizer: leave its own momentum at 0 to match the paper).
Momentum averages the honest noise down while an attack that persists across steps stays
visible. It also shrinks the honest spread (by about sqrt((1 - beta) / (1 + beta)) for
independent noise), and tau should sit just above that spread: one attacker can hold the
aggregate about tau f / (n - f) away from the honest mean. ``beta=0`` clips the raw gradients.
The first message is the first gradient (beta_1 = 0, our reading; the authors' code,
``epfml/byzantine-robust-optimizer``, also starts there but sums m <- beta m + g, 1 / (1 - beta)
times ours, with tau scaled alike). The first aggregate starts from v_0 = 0, as in that code.
A Byzantine rank's attack replaces its momentum (:meth:`local`, then the attack, then
:meth:`aggregate`). Non-finite vectors are dropped first (:mod:`lab.aggregate.robust`).
"""
from __future__ import annotations

import torch

from ..argspec import Arg, takes
from .base import LAYERWISE, register
from .robust import RobustAggregator, whole


@register("centered_clip")
@takes(tau=Arg(float, gt=0, help="clipping radius"),
       iters=Arg(int, ge=1, le=1000, help="clipping iterations per step"),
       beta=Arg(float, ge=0, lt=1, help="worker momentum"), layerwise=LAYERWISE, rule=whole)
class CenteredClip(RobustAggregator):
    name = "centered_clip"

    def __init__(self, comm, tau: float = 1.0, iters: int = 1, beta: float = 0.9,
                 layerwise: bool = False):
        super().__init__(comm, layerwise)
        self.tau, self.iters, self.beta = float(tau), iters, float(beta)
        self.previous = None  # v, the last aggregate
        self.momentum = None  # this worker's m_i, one tensor per gradient

    def local(self, grads, step):
        """This worker's momentum m_i = (1 - beta) g_i + beta m_i (the gradients if beta = 0)."""
        if self.beta == 0:
            return grads
        if self.momentum is None:
            self.momentum = [g.detach().clone() for g in grads]
        else:
            for m, g in zip(self.momentum, grads):
                m.mul_(self.beta).add_(g.detach(), alpha=1 - self.beta)
        return [m.clone() for m in self.momentum]  # the caller may not alter the state

    def rule(self, vectors, dropped):
        v = torch.zeros_like(vectors[0]) if self.previous is None else self.previous.clone()
        for _ in range(self.iters):
            diff = vectors - v
            norms = diff.norm(dim=1, keepdim=True)
            scale = (self.tau / norms.clamp_min(1e-12)).clamp(max=1.0)
            v = v + (diff * scale).mean(dim=0)
        self.previous = v
        return v
