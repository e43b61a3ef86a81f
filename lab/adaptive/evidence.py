"""Which exchange a step ran, read from the ledger rather than from the aggregator's label.

A training run records, per step, the traffic rank 0 put through ``lab.comm``
(``History.series["traffic"]``: ``{op: [calls, bytes]}``, :func:`lab.train.loop.traffic`). With
``k`` kept entries (4-byte values, int32 indices) the two ways AR-Topk can exchange them leave
different marks (Tyagi & Swany, BigData 2023, Sec. III-A/B):

- ``"ar"``: a broadcast of the leader's ``4k`` index bytes (counted at the leader only, so 0
  at rank 0 when another rank leads) and an allreduce of the ``4k`` value bytes;
- ``"allgather"``: no broadcast, an allgather of exactly ``8k`` bytes (values and indices);
- ``"other"``: anything else (a bug, or a different scheme).

Small control messages may ride along (``extra`` bytes: the controller's gain allreduce, 4
bytes per candidate; its decision's 8-byte broadcast from rank 0; VAR-Topk's 4-byte norm
allgather; the overlap measurement's 4 bytes).
"""
from __future__ import annotations

from ..compress.topk import resolve_k

#: what :func:`exchange_taken` may return
PATHS = ("ar", "allgather", "other")


def exchange_taken(traffic: dict, k: int, extra: int = 64) -> str:
    """``"ar"``, ``"allgather"`` or ``"other"``: the exchange one step's ``traffic`` shows for
    ``k`` kept entries (up to ``extra`` bytes of control messages per op)."""
    calls = {op: int(cb[0]) for op, cb in traffic.items()}
    sent = {op: int(cb[1]) for op, cb in traffic.items()}
    bcast, ar, ag = sent.get("broadcast", 0), sent.get("allreduce", 0), sent.get("allgather", 0)
    indices = bcast <= extra or 4 * k <= bcast <= 4 * k + extra  # led here, or not
    if calls.get("broadcast", 0) >= 1 and indices and 4 * k <= ar <= 4 * k + extra \
            and ag <= extra:
        return "ar"
    if bcast <= extra and ag == 8 * k and ar <= extra:
        return "allgather"
    return "other"


def exchanges(history, n: int, density: float | None = None, extra: int = 64) -> list[str]:
    """:func:`exchange_taken` for every step of a run over ``n`` parameters (one flat vector),
    with ``k`` from ``density`` (or, per step, the run's ``density`` series)."""
    traffic = history.series["traffic"]
    dens = [density] * len(traffic) if density is not None else history.series["density"]
    return [exchange_taken(t, resolve_k(n, d), extra) for t, d in zip(traffic, dens)]


def ar_fraction(paths) -> float:
    """The fraction of steps whose ledger shows the AR exchange."""
    paths = list(paths)
    return sum(p == "ar" for p in paths) / len(paths) if paths else 0.0


__all__ = ["PATHS", "ar_fraction", "exchange_taken", "exchanges"]
