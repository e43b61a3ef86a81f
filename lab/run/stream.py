"""Rank 0's history, streamed to the launching process step by step, so that a run whose
ranks die still leaves the history up to its last completed step (:class:`~lab.run.RunFailed`).

:class:`Tail` turns a growing :class:`~lab.train.History` into deltas (the values appended since
the last call); :func:`extend` applies them to a History in the caller.
"""
from __future__ import annotations

from .history import History

_LISTS = ("loss", "bytes", "recv_bytes", "wire_sent", "wire_recv", "compute_s", "codec_s", "comm_s", "modeled_comm_s",
          "eval_step", "test_loss", "test_acc")


class Tail:
    """Remembers how much of a History was already sent."""

    def __init__(self):
        self.sizes: dict = {}

    def delta(self, h: History) -> dict:
        """What ``h`` gained since the last call: the new entries of each list and series
        (a scalar series whole), and the current ``wall_s``; :func:`extend` applies it."""
        out: dict = {"wall_s": h.wall_s}
        for k in _LISTS:
            v = getattr(h, k)
            out[k] = v[self.sizes.get(k, 0):]
            self.sizes[k] = len(v)
        series = {}
        for k, v in h.series.items():
            if isinstance(v, list):
                series[k] = v[self.sizes.get(("s", k), 0):]
                self.sizes[("s", k)] = len(v)
            else:
                series[k] = v  # a scalar series is sent whole
        out["series"] = series
        return out


def extend(h: History, delta: dict) -> None:
    """Append a :meth:`Tail.delta` to ``h``."""
    for k in _LISTS:
        getattr(h, k).extend(delta[k])
    for k, v in delta["series"].items():
        if isinstance(v, list):
            h.series.setdefault(k, []).extend(v)
        else:
            h.series[k] = v
    h.wall_s = delta["wall_s"]
