"""lab: communication-efficient distributed deep learning, implemented once and run for real.

Importing ``lab`` starts nothing: no process group, no threads. The curated namespace:

- :func:`~lab.runtime.launch` runs a function in N real processes (:mod:`lab.runtime`);
- :class:`~lab.comm.Collective`, :class:`~lab.comm.Network`, :class:`~lab.comm.CommLedger`
  (:mod:`lab.comm`);
- :mod:`lab.compress` codecs by name (``lab.compress.make("fp16")``);
- :class:`~lab.train.TrainConfig` and :func:`lab.train.train` / :func:`~lab.train.train_many`
  (:mod:`lab.train`).
"""
#: The version of ``lab``.
__version__ = "0.12.0"

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
