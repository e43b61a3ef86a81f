"""``TrainConfig`` lives in :mod:`lab.run.config` (shared by every kind of run); this name stays
so that ``lab.train.config.TrainConfig`` keeps working."""
from ..run.config import OPTIMIZERS, TrainConfig

__all__ = ["OPTIMIZERS", "TrainConfig"]
