"""What every kind of run shares, below ``train``, ``sync``, ``averaging`` and ``pipeline``:
the run config (:class:`~lab.train.TrainConfig`), what a run measured
(:class:`~lab.train.History`), checkpoints (:mod:`lab.run.checkpoint`), the failure record
(:class:`RunFailed`), and the pieces each rank builds from a config (:mod:`lab.run.build`,
imported on use: it reaches the scheme registries).
"""
from .checkpoint import Checkpointer, latest
from .config import TrainConfig
from .failed import RunFailed
from .history import History, table
from .straggler import Straggler

__all__ = ["Checkpointer", "History", "RunFailed", "Straggler", "TrainConfig", "latest", "table"]
