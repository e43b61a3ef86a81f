"""Synchronization modes: who talks to whom (DESIGN.md, "Training engine").

``allreduce`` (default): peers average gradients with collectives in the one training loop.
Other modes (a parameter server with BSP, ASP, SSP, staleness drop) give rank roles and run
their own loop over the same pieces, returning the same ``History``.
Every module here is imported so its ``@register`` lines run.
"""
import importlib
import pkgutil

from .base import REGISTRY, SyncMode, register

for _m in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_m.name}")

__all__ = ["REGISTRY", "SyncMode", "register"]
