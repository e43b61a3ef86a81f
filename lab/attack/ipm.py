"""Inner-product manipulation (IPM).

Xie, Koyejo, Gupta, "Fall of empires: breaking Byzantine-tolerant SGD by inner product
manipulation", UAI 2019 (Section 4): the Byzantine workers send -epsilon times the mean of
the honest gradients. With a small epsilon the vector is close to the honest ones and passes
Krum and the median, yet it makes the inner product of the aggregate with the true gradient
small or negative, so descent stalls. What the attacker knows and how:
:mod:`lab.attack.omniscient`.
"""
from __future__ import annotations

from .args import checker, positive
from .base import register
from .omniscient import OmniscientAttack


@register("ipm")
class IPM(OmniscientAttack):
    name = "ipm"
    check = checker("ipm")

    def __init__(self, engine, byzantine, epsilon: float = 0.1):
        super().__init__(engine, byzantine)
        self.epsilon = positive("ipm", "epsilon", epsilon)

    def forge(self, mean, std):
        return -self.epsilon * mean
