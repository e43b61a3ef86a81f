"""``RunFailed``: a run that stopped keeps what it had (the history so far and the error)."""
from __future__ import annotations

import json
from pathlib import Path

from ..runtime import LaunchError


class RunFailed(LaunchError):
    """A rank raised, died or hung. ``history`` is the :class:`~lab.train.History` up to the last
    completed step (None if none completed; a data-parallel run's loss is then rank 0's, the
    other ranks' being gone with them), ``error`` a dict with the failing ``rank``, the
    ``cause`` (one line) and the ``traceback`` (or the rank's last stderr lines); the
    :class:`~lab.runtime.LaunchError` is ``__cause__`` and its message is ``str(self)``."""

    def __init__(self, error: LaunchError, history=None):
        RuntimeError.__init__(self, str(error))
        self.rank, self.remote_traceback, self.stderr = error.rank, error.remote_traceback, error.stderr
        self.history = history
        self.error = {"rank": error.rank, "cause": str(error).split("\n", 1)[0],
                      "traceback": error.remote_traceback or error.stderr}
        self.__cause__ = error

    def save(self, out_dir) -> list:
        """Write ``history.json`` (if any step completed) and ``error.json`` into ``out_dir``
        (created if needed); returns the paths written (``pathlib.Path``)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = []
        if self.history is not None:
            paths.append(out / "history.json")
            self.history.to_json(paths[-1])
        paths.append(out / "error.json")
        with open(paths[-1], "w") as f:
            json.dump({**self.error, "steps_completed": self.history.steps if self.history else 0},
                      f, indent=1)
        return paths
