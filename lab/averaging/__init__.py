"""Averaging schemes: what happens after the optimizer step (DESIGN.md, "Training engine").

``none`` (default): nothing; the gradients were already averaged. Schemes that average
*parameters* (local SGD, EASGD...) say, step by step, whether gradients are exchanged at all.
Every module here is imported so its ``@register`` lines run.
"""
import importlib
import pkgutil

from .base import REGISTRY, Averaging, make, register

for _m in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_m.name}")

__all__ = ["REGISTRY", "Averaging", "make", "register"]
