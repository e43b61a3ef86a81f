"""``Straggler`` lives in :mod:`lab.run.straggler` (the data-parallel loop, the parameter server
and the pipeline all use it); this name stays so that ``lab.train.straggler`` keeps working."""
from ..run.straggler import Straggler

__all__ = ["Straggler"]
