"""Sign flip: a Byzantine worker sends -scale times its true gradient.

The simplest attack on the mean (e.g. Allen-Zhu et al. 2021; Karimireddy et al. 2021 use it
as a baseline): with one attacker and scale large enough, the mean points uphill.
"""
from __future__ import annotations

from ..argspec import Arg, takes
from .base import Attack, register


@register("signflip")
@takes(byzantine=Arg(bool), scale=Arg(float, gt=0, help="the factor of the flipped gradient"))
class SignFlip(Attack):
    name = "signflip"

    def __init__(self, engine, byzantine, scale: float = 4.0):
        super().__init__(engine, byzantine)
        self.scale = float(scale)

    def on_gradient(self, grads, step):
        return [-self.scale * g for g in grads] if self.byzantine else grads
