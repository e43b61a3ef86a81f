"""The communication ledger: one record per collective call, bytes counted from real tensors."""
from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import NamedTuple


class CommRecord(NamedTuple):
    """One collective call. A tuple of plain numbers and strings: the garbage collector stops
    tracking it, so a ledger of many thousand records costs nothing at each collection."""

    op: str            # "allreduce", "allgather", "broadcast", "send", ...
    tag: str           # what the caller says it is ("grad", "indices", ...)
    bytes: int         # bytes this rank handed to torch.distributed in this call
    seconds: float     # measured wall time, including any emulated network delay
    modeled: float     # alpha-beta time of the call on the configured network (0 if none)
    step: int = -1     # training step the call belongs to, when the caller sets one
    recv_bytes: int = 0  # bytes that arrived in this rank's buffers from other ranks
    wire_sent: int = 0   # bytes this rank put on the wire under the op's algorithm
    wire_recv: int = 0   # bytes it took off the wire (lab.comm.cost.wire_bytes)


@dataclass
class CommLedger:
    """Every collective call of one rank, as :class:`~lab.comm.CommRecord` rows; ``step`` is stamped on
    each new record (the training loop sets it). Totals by op and tag answer "how many bytes"
    from what was actually handed to ``torch.distributed``."""

    records: list[CommRecord] = field(default_factory=list)
    step: int = -1

    def add(self, op: str, tag: str, nbytes: int, seconds: float, modeled: float = 0.0,
            recv_bytes: int = 0, wire: tuple[int, int] = (0, 0)) -> None:
        """Append one record, stamped with the current ``step``. :class:`Collective` calls this
        for every op; ``wire`` is (bytes sent, bytes received) on this rank's wire."""
        self.records.append(CommRecord(op, tag, int(nbytes), seconds, modeled, self.step,
                                       int(recv_bytes), int(wire[0]), int(wire[1])))

    def total_bytes(self, op: str | None = None, tag: str | None = None) -> int:
        """Bytes this rank handed to ``torch.distributed``, summed over the records matching
        ``op`` and ``tag`` (``None``: any op, any tag)."""
        return sum(r.bytes for r in self._select(op, tag))

    def total_received(self, op: str | None = None, tag: str | None = None) -> int:
        """Bytes that arrived in this rank's buffers from other ranks, over the matching
        records (``None``: any op, any tag)."""
        return sum(r.recv_bytes for r in self._select(op, tag))

    def total_wire(self, op: str | None = None, tag: str | None = None) -> tuple[int, int]:
        """(bytes sent, bytes received) on this rank's wire under each op's algorithm."""
        rs = self._select(op, tag)
        return sum(r.wire_sent for r in rs), sum(r.wire_recv for r in rs)

    def total_seconds(self, op: str | None = None, tag: str | None = None) -> float:
        """Measured wall time of the matching calls, emulated delays included (``None``: any
        op, any tag)."""
        return sum(r.seconds for r in self._select(op, tag))

    def total_modeled(self, op: str | None = None, tag: str | None = None) -> float:
        """Alpha-beta time of the matching calls on the configured network; 0 for calls made
        without one (``None``: any op, any tag)."""
        return sum(r.modeled for r in self._select(op, tag))

    def by_op(self) -> dict[str, int]:
        """Bytes sent, per op name (``{"allreduce": ..., "allgather": ...}``)."""
        out: dict[str, int] = defaultdict(int)
        for r in self.records:
            out[r.op] += r.bytes
        return dict(out)

    def mark(self) -> int:
        """A position to measure from: ``ledger.since(mark)`` gives later records."""
        return len(self.records)

    def since(self, mark: int) -> list[CommRecord]:
        """The records added after :meth:`mark` returned ``mark``."""
        return self.records[mark:]

    def clear(self) -> None:
        """Drop every record (``step`` is kept)."""
        self.records.clear()

    def to_dicts(self) -> list[dict]:
        """The records as plain dicts, one per call, e.g. for a DataFrame or JSON."""
        return [r._asdict() for r in self.records]

    def _select(self, op, tag):
        return [r for r in self.records if (op is None or r.op == op) and (tag is None or r.tag == tag)]

    def __len__(self) -> int:
        return len(self.records)


class Stopwatch:
    """``with Stopwatch() as sw: ...; sw.seconds``"""

    def __enter__(self):
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.start
        return False
