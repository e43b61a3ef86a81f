"""Schedules: *when* gradients move (DESIGN.md, "Training engine").

``sync`` (default): backward, then one exchange of every gradient, then the optimizer step.
Every module here is imported so its ``@register`` lines run; adding a schedule is adding a file.
"""
import importlib
import pkgutil

from .base import REGISTRY, Schedule, make, register

for _m in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_m.name}")

__all__ = ["REGISTRY", "Schedule", "make", "register"]
