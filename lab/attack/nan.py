"""NaN: a Byzantine worker sends a gradient full of NaN (a crashed or corrupted worker, or a
deliberate attack). The plain mean must refuse it; robust rules drop it
(:mod:`lab.aggregate.robust`)."""
from __future__ import annotations

import torch

from .base import Attack, register


@register("nan")
class NaNAttack(Attack):
    name = "nan"

    def on_gradient(self, grads, step):
        return [torch.full_like(g, float("nan")) for g in grads] if self.byzantine else grads
