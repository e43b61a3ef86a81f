"""Data-parallel training: ``TrainConfig`` in, ``History`` out."""
from .config import TrainConfig
from .history import History, table
from .loop import build, evaluate, train, train_configs, train_many, train_rank

__all__ = ["History", "TrainConfig", "build", "evaluate", "table", "train", "train_configs",
           "train_many", "train_rank"]
