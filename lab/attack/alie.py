"""A Little Is Enough (ALIE).

Baruch, Baruch, Goldberg, "A little is enough: circumventing defenses for distributed
learning", NeurIPS 2019 (Algorithm 3): every Byzantine worker sends mu - z * sigma, the
coordinate-wise mean of the honest gradients shifted by z standard deviations, small enough
to stay inside the spread of honest vectors (so Krum, the median and the trimmed mean keep it)
yet consistent across steps. The paper's z: with s = floor(n / 2 + 1) - f supporters needed,
z = Phi^{-1}((n - s) / n). For the small worlds of a CPU notebook that z is close to 0, so
``z`` may also be given. The direction (minus, against the mean) is our reading.
What the attacker knows and how: :mod:`lab.attack.omniscient`.
"""
from __future__ import annotations

import math
from statistics import NormalDist

from .base import register
from .omniscient import OmniscientAttack


def paper_z(n: int, f: int) -> float:
    s = math.floor(n / 2 + 1) - f
    return NormalDist().inv_cdf(min(max((n - s) / n, 1e-6), 1 - 1e-6))


@register("alie")
class ALIE(OmniscientAttack):
    name = "alie"

    @classmethod
    def check(cls, cfg, workers):
        z = cfg.attack_kw.get("z")
        if z is not None and (isinstance(z, bool) or not isinstance(z, (int, float))
                              or not math.isfinite(z)):
            raise ValueError(f"alie: z must be a finite number, got {z!r}")

    def __init__(self, engine, byzantine, z: float | None = None):
        super().__init__(engine, byzantine)
        if z is not None and (isinstance(z, bool) or not isinstance(z, (int, float))
                              or not math.isfinite(z)):
            raise ValueError(f"alie: z must be a finite number, got {z!r}")
        self.z = paper_z(engine.world_size, engine.cfg.byzantine) if z is None else float(z)

    def forge(self, mean, std):
        return mean - self.z * std
