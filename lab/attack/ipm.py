"""Inner-product manipulation (IPM).

Xie, Koyejo, Gupta, "Fall of empires: breaking Byzantine-tolerant SGD by inner product
manipulation", UAI 2019 (Section 4): the Byzantine workers send -epsilon times the mean of the
honest gradients. With a small epsilon the vector is close to the honest ones and passes Krum
and the median, yet it makes the inner product of the aggregate with the true gradient small or
negative, so descent stalls.

``knowledge="honest"`` (default) is the paper's omniscient attacker; ``"own"`` the
non-omniscient variant (the mean of the Byzantine workers' own gradients). How the statistics
travel: :mod:`lab.attack.knowledge`.
"""
from __future__ import annotations

from ..argspec import Arg, takes
from .args import POSITIVE
from .base import register
from .knowledge import KNOWLEDGE_ARG, StatisticsAttack


@register("ipm")
@takes(byzantine=Arg(bool), epsilon=POSITIVE, knowledge=KNOWLEDGE_ARG)
class IPM(StatisticsAttack):
    name = "ipm"
    needs_spread = False

    def __init__(self, engine, byzantine, epsilon: float = 0.1, knowledge: str = "honest"):
        self.epsilon = float(epsilon)
        super().__init__(engine, byzantine, knowledge)

    def forge(self, mean, std):
        return -self.epsilon * mean
