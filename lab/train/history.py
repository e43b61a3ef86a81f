"""``History`` lives in :mod:`lab.run.history` (shared by every kind of run); this name stays so
that ``lab.train.history.History`` keeps working."""
from ..run.history import History, table

__all__ = ["History", "table"]
