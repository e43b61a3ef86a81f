"""Attacks: what a Byzantine rank does to what it sends (``none`` by default).

Every module here is imported so its ``@register`` lines run.
"""
import importlib
import pkgutil

from .base import REGISTRY, Attack, make, register

for _m in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_m.name}")

__all__ = ["REGISTRY", "Attack", "make", "register"]
