"""The attack contract. Every rank builds the attack (some attacks need a collective that
honest ranks join too); ``byzantine`` says whether this rank misbehaves. By convention the
Byzantine ranks are the *last* ``TrainConfig.byzantine`` ranks, so rank 0 (which evaluates)
stays honest."""
from __future__ import annotations

import torch

from ..argspec import Arg, takes
from ..engine import Engine
from ..registry import Registry

#: Every attack by name: ``REGISTRY.names()``, ``REGISTRY.make(name, ...)``.
REGISTRY = Registry("attack")
register = REGISTRY.register


@takes(byzantine=Arg(bool, help="whether this rank misbehaves"))
class Attack:
    """What a rank sends: :meth:`on_batch` may change the batch it trains on and
    :meth:`on_gradient` the gradients it hands to the aggregator. Honest ranks
    (``byzantine=False``) and the default attack (``none``) change nothing."""

    name = "base"

    def __init__(self, engine: Engine, byzantine: bool):
        self.engine, self.byzantine = engine, byzantine

    def on_batch(self, x: torch.Tensor, y: torch.Tensor, step: int):
        """The batch this rank trains on (label flipping changes it)."""
        return x, y

    def on_gradient(self, grads: list[torch.Tensor], step: int) -> list[torch.Tensor]:
        """What this rank hands to the aggregator instead of its honest gradients."""
        return grads


@register("none")
class NoAttack(Attack):
    name = "none"


def make(name: str, engine: Engine, byzantine: bool, **kwargs) -> Attack:
    """Build the attack registered as ``name`` for ``engine``; ``byzantine`` says whether this
    rank misbehaves; ``kwargs`` are checked against the attack's arguments."""
    return REGISTRY.make(name, engine=engine, byzantine=byzantine, **kwargs)
