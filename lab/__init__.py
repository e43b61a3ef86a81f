"""lab: communication-efficient distributed deep learning, implemented once and run for real.

Importing ``lab`` starts nothing: no process group, no threads. The curated namespace:

- :func:`launch` runs a function in N real processes (``lab.runtime``);
- :class:`Collective`, :class:`Network`, :class:`CommLedger` (``lab.comm``);
- :mod:`lab.compress` codecs by name (``lab.compress.make("fp16")``);
- :class:`TrainConfig` and ``lab.train.train`` / :func:`train_many` (``lab.train``).
"""
__version__ = "0.1.0"

from .comm import AlphaBeta, Collective, CommLedger, Network  # noqa: E402
from .runtime import LaunchError, RankContext, launch  # noqa: E402


_SUBMODULES = ("aggregate", "bench", "compress", "data", "hooks", "models", "nb", "train", "viz")


def __getattr__(name):  # submodules and the training stack are imported on first use only
    import importlib
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in ("TrainConfig", "History", "train_many"):
        return getattr(importlib.import_module(f"{__name__}.train"), name)
    raise AttributeError(f"module 'lab' has no attribute {name!r}")


__all__ = ["AlphaBeta", "Collective", "CommLedger", "History", "LaunchError", "Network",
           "RankContext", "TrainConfig", "__version__", "launch", "train", "train_many"]
