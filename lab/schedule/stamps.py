"""When the *last* rank arrived: the emulated link's start time, shared by the ranks of one host.

A real allreduce cannot deliver before every rank has handed it its part, so an emulated link
must start a transfer when the last rank arrives, not when this rank did: timed from its own
arrival, a rank that arrives early finishes early, and skew between the ranks hides inside the
emulated sleep. The ranks of one host share its monotonic clock (``time.perf_counter``), so
each rank posts its arrival times on a :class:`Board`, a small shared-memory table, and reads
the others' once a real call has shown they are there. Nothing crosses the emulated network
(the ledger is untouched); where the ranks do not share a host, or the table cannot be made,
:func:`board` returns None and a schedule times from its own arrival, as before.
"""
from __future__ import annotations

import mmap
import os
import struct
import tempfile
import time

_SLOTS = 4096   # per rank: (sequence, seconds) pairs, handed out to channels in order
_PAIR = struct.Struct("dd")
_BOARD: dict = {}


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def board(comm) -> "Board | None":
    """This process's board for ``comm``'s group (made once, on first use, by every rank at
    the same point of its program: the ranks agree on it through the group's store); None for
    a world of one, ranks on several hosts, or where no store or shared memory is at hand."""
    if not comm.distributed or comm.world_size < 2 or comm.group is not None:
        return None
    if "board" not in _BOARD:
        _BOARD["board"] = _make(comm.rank, comm.world_size)
    return _BOARD["board"]


def _make(rank: int, world: int) -> "Board | None":
    try:
        from torch.distributed import distributed_c10d
        store = distributed_c10d._get_default_store()
    except Exception:  # noqa: BLE001  (no store: time from each rank's own arrival)
        return None
    size = world * _SLOTS * _PAIR.size
    b, path = None, ""
    if rank == 0:
        try:
            fd, path = tempfile.mkstemp(prefix="lab-stamps-", dir="/dev/shm"
                                        if os.path.isdir("/dev/shm") else None)
            os.ftruncate(fd, size)
            os.close(fd)
        except OSError:
            path = ""
        store.set("lab/stamps/path", f"{_boot_id()}|{path}")
    host, path = store.get("lab/stamps/path").decode().split("|", 1)
    if path and host == _boot_id():
        try:
            with open(path, "r+b") as f:
                b = Board(mmap.mmap(f.fileno(), size), rank, world)
        except OSError:
            b = None
    store.set(f"lab/stamps/ok/{rank}", "1" if b is not None else "0")
    ok = all(store.get(f"lab/stamps/ok/{r}") == b"1" for r in range(world))
    if rank == 0 and path:
        try:
            os.unlink(path)   # the ranks' mappings keep it alive; nothing is left behind
        except OSError:
            pass
    return b if ok else None


class Board:
    """Each rank's row of ``(sequence, seconds)`` pairs; :meth:`channel` hands out slots."""

    def __init__(self, buf: mmap.mmap, rank: int, world: int):
        self.buf, self.rank, self.world, self.used = buf, rank, world, 0

    def channel(self, n: int) -> "Channel":
        """``n`` slots of every rank's row, the next free ones (every rank asks for channels in
        the same order, so they line up)."""
        if self.used + n > _SLOTS:
            raise RuntimeError(f"stamps: out of slots ({self.used} + {n} > {_SLOTS})")
        ch = Channel(self, self.used, n)
        self.used += n
        return ch


class Channel:
    """``n`` stamps per rank: :meth:`post` this rank's, :meth:`last` the latest over ranks."""

    def __init__(self, board: Board, first: int, n: int):
        self.b, self.first, self.n = board, first, n

    def _at(self, rank: int, i: int) -> int:
        return (rank * _SLOTS + self.first + i) * _PAIR.size

    def post(self, seq: int, i: int, t: float) -> None:
        """Stamp ``i`` of round ``seq`` on this rank is ``t`` (perf_counter seconds)."""
        at = self._at(self.b.rank, i)
        self.b.buf[at + 8:at + 16] = struct.pack("d", t)   # the time first, then its round
        self.b.buf[at:at + 8] = struct.pack("d", float(seq + 1))   # 0: never posted

    def last(self, seq: int, i: int, wait: float = 0.05) -> float | None:
        """The latest stamp ``i`` of round ``seq`` over every rank; None if a rank has not
        posted it within ``wait`` seconds, or has already overwritten it with a later round's
        (a caller then uses its own)."""
        deadline, latest, seq = time.perf_counter() + wait, float("-inf"), float(seq + 1)
        for r in range(self.b.world):
            at = self._at(r, i)
            while True:
                s, t = _PAIR.unpack_from(self.b.buf, at)
                if s == seq:
                    latest = max(latest, t)
                    break
                if s > seq or time.perf_counter() > deadline:   # gone (overwritten), or late
                    return None
                time.sleep(0.0002)
        return latest
