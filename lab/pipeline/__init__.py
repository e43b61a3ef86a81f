"""Pipeline parallelism over ``lab.comm``: stages, schedules (GPipe, 1F1B, asynchronous 1F1B
with weight stashing or the Nesterov look-ahead) and non-blocking asynchronous sparse
averaging across replicas on a (replica, stage) mesh, each axis on its own emulated link.
``python -m lab pipeline --help``."""
from .config import PipelineConfig
from .loop import train, train_many

__all__ = ["PipelineConfig", "train", "train_many"]
