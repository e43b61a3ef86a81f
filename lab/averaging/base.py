"""The averaging contract: act on the parameters after the optimizer step."""
from __future__ import annotations

from ..engine import Engine
from ..registry import Registry

REGISTRY = Registry("averaging")
register = REGISTRY.register


class Averaging:
    name = "base"

    def __init__(self, engine: Engine):
        self.engine = engine

    def exchange_gradients(self, step: int) -> bool:
        """Whether the aggregator averages this step's gradients (False: a local step)."""
        return True

    def after_step(self, step: int) -> dict:
        """Called after the optimizer step; returns per-step series for ``History.series``."""
        return {}

    def finish(self) -> None:
        """Called once after the last step (one-shot averaging acts here)."""


@register("none")
class NoAveraging(Averaging):
    """Synchronous data parallelism: gradients are averaged every step, parameters never."""
    name = "none"


def make(name: str, engine: Engine, **kwargs) -> Averaging:
    return REGISTRY.make(name, engine=engine, **kwargs)
