"""A Little Is Enough (ALIE).

Baruch, Baruch, Goldberg, "A little is enough: circumventing defenses for distributed
learning", NeurIPS 2019 (Algorithm 3): the corrupted workers estimate the coordinate-wise mean
mu and standard deviation sigma from their *own* gradients, and all send mu - z * sigma: inside
the spread of honest vectors (so Krum, the median and the trimmed mean keep it) yet consistent
across steps. With s = floor(n / 2 + 1) - f supporters needed, z = Phi^{-1}((n - s) / n). The
minus sign and the population sigma are those of the authors' code
(``moranant/attacking_distributed_learning``, ``malicious.py``).

``knowledge="own"`` (default) is the paper's attacker; ``"honest"`` the omniscient variant of
later work (statistics of the honest workers' gradients). One attacker has no spread of its own
(sigma = 0: it would send its honest gradient), so ``"own"`` needs byzantine >= 2. For the small
worlds of a CPU notebook the paper's z is close to 0, so ``z`` may also be given. How the
statistics travel: :mod:`lab.attack.knowledge`.
"""
from __future__ import annotations

import math
from statistics import NormalDist

from ..argspec import Arg, takes
from .base import register
from .knowledge import KNOWLEDGE_ARG, StatisticsAttack


def paper_z(n: int, f: int) -> float:
    s = math.floor(n / 2 + 1) - f
    return NormalDist().inv_cdf(min(max((n - s) / n, 1e-6), 1 - 1e-6))


def _check(knowledge, byzantine: int) -> None:
    if knowledge == "own" and byzantine == 1:
        raise ValueError("alie: knowledge='own' estimates sigma from the Byzantine workers' own "
                         "gradients and needs byzantine >= 2 (with one, sigma = 0 and it sends "
                         "its honest gradient); use knowledge='honest' or more attackers")


@register("alie")
@takes(byzantine=Arg(bool), z=Arg(float, none=True, help="standard deviations below the mean "
                                                         "(None: the paper's z)"),
       knowledge=KNOWLEDGE_ARG)
class ALIE(StatisticsAttack):
    name = "alie"

    @classmethod
    def check_config(cls, cfg):
        """Before launch, with the config: the knowledge model fits the number of attackers."""
        _check(cfg.attack_kw.get("knowledge", "own"), cfg.byzantine)

    def __init__(self, engine, byzantine, z: float | None = None, knowledge: str = "own"):
        _check(knowledge, engine.cfg.byzantine)
        super().__init__(engine, byzantine, knowledge)
        self.z = paper_z(engine.world_size, engine.cfg.byzantine) if z is None else float(z)

    def forge(self, mean, std):
        return mean - self.z * std
