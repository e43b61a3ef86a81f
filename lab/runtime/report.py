"""What a failed launch says: :class:`LaunchError` and the messages that name the failing rank.

A timeout names the rank that stopped: each rank still running is asked for its Python stack
(``faulthandler`` on SIGUSR1, answered even from inside a C++ collective), and a rank that is
not waiting in a collective is the one its peers wait for. A rank that gloo aborts because the
ranks' calls do not match (different sizes or dtypes) is reported with the collective, its
call site and gloo's reason; a rank that fails because a peer had already returned is told
apart as a skipped collective. Peers that lost their connection to a failed rank are echoes,
not the cause (see :mod:`lab.runtime.failure`); :func:`lab.runtime.launch` decides which
report a failure gets.

An error record (from the ranks' queue) is ``(time, traceback, summary, is_echo, joined,
rank)``.
"""
from __future__ import annotations

import os
import time

from .failure import STACK_SIGNAL, Where, gloo_error, signal_name, where


class LaunchError(RuntimeError):
    """A rank failed: ``rank`` says which, ``remote_traceback`` what happened there, and
    ``stderr`` the last lines it wrote to stderr (shown when it died without a traceback);
    ``records``: what ranks streamed to the caller before (:meth:`~lab.runtime.RankContext.stream`), as
    ``(rank, item)`` in arrival order."""

    def __init__(self, rank: int | None, message: str, remote_traceback: str = "",
                 stderr: str = ""):
        self.rank, self.remote_traceback, self.stderr = rank, remote_traceback, stderr
        self.records: list = []
        if remote_traceback:
            message += f"\n\n--- traceback from rank {rank} ---\n{remote_traceback}"
        elif stderr:
            message += f"\n\n--- last stderr lines of rank {rank} ---\n{stderr}"
        super().__init__(message)


class _NotConnected(Exception):
    """Every rank failed to connect the group: ``error`` is the LaunchError to raise if the
    last try fails too."""

    def __init__(self, error: LaunchError):
        super().__init__(str(error))
        self.error = error


def _where_now(procs, stacks, ranks, wait: float = 1.0) -> dict:
    """``{rank: Where}`` of those of ``ranks`` still running, from the Python stack each dumps
    on :data:`~lab.runtime.failure.STACK_SIGNAL` (it answers even from inside a collective)."""
    sizes = {}
    for r in ranks:
        if procs[r].is_alive():
            try:
                sizes[r] = os.path.getsize(stacks[r])
                os.kill(procs[r].pid, STACK_SIGNAL)
            except OSError:
                pass
    texts: dict = {}
    end = time.monotonic() + wait
    while sizes and time.monotonic() < end:
        time.sleep(0.05)
        for r in list(sizes):
            try:
                with open(stacks[r]) as f:
                    f.seek(sizes[r])
                    text = f.read()
            except OSError:
                text = ""
            if text and text == texts.get(r):   # written, and no longer growing
                del sizes[r]
            texts[r] = text
    return {r: w for r, w in ((r, where(t)) for r, t in texts.items()) if w is not None}


def _stopped(procs, stacks, pending, results, world_size, what, waiting=()) -> LaunchError:
    """The error of a run whose ranks stopped progressing: names the rank the others wait
    for (the one not in a collective), or says that every rank waits in one that cannot
    complete (mismatched calls, a deadlock), or that a rank returned without making it."""
    at = _where_now(procs, stacks, pending)
    for e in waiting:   # ranks whose collective timed out: where their traceback shows
        w = where(e[1])
        if w is not None:
            at[e[-1]] = w
    stuck = [r for r in pending if r in at and at[r].collective is None]
    inside = sorted(r for r in at if at[r].collective)
    lines = "".join(f"\n  rank {r}: {at[r]}" for r in sorted(at))
    if stuck:
        r = stuck[0]
        peers = ", ".join(map(str, inside)) if inside else ""
        msg = (f"timeout: rank {r} of {world_size} {what}: it is {at[r]}"
               + (f", and rank(s) {peers} wait for it in {_names(at, inside)}" if peers else "")
               + "; all ranks were ended")
        return LaunchError(r, msg + "\n\nwhere each rank was:" + lines)
    if inside and results:
        r = inside[0]
        return LaunchError(r, f"timeout: rank(s) {inside} of {world_size} wait in "
                              f"{_names(at, inside)}, but rank(s) {sorted(results)} returned "
                              f"without making that call (a skipped collective); all ranks "
                              f"were ended\n\nwhere each rank was:" + lines)
    if inside:
        r = inside[0]
        return LaunchError(r, f"timeout: every rank still running {what} inside a collective "
                              f"that cannot complete ({_names(at, inside)}): the ranks made "
                              f"different collective calls, or the same ones in a different "
                              f"order; all ranks were ended\n\nwhere each rank was:" + lines)
    if waiting and not pending:
        return _error(min(waiting), world_size)
    r = pending[0] if pending else 0
    return LaunchError(r, f"timeout: rank(s) {pending} of {world_size} {what} (a hang, a "
                          f"deadlock, or a mismatched collective); all ranks were ended" + lines)


def _names(at: dict, ranks) -> str:
    names = sorted({at[r].collective for r in ranks})
    return " and ".join(names)


def _died(procs, stacks, rank, code, tail, results, world_size) -> LaunchError:
    """A rank that died without a Python exception; if gloo aborted it over a mismatched
    collective, the error names the collective, its call site, the reason and the peers."""
    how = (f"was killed by {signal_name(-code)}" if code is not None and code < 0
           else f"exited with code {code} without returning a result (if you launched "
                f"from a script, put the launching code under `if __name__ == '__main__':`)")
    gloo = gloo_error(tail)
    if gloo is None:
        return LaunchError(rank, f"rank {rank} of {world_size} {how}; all ranks were ended",
                           stderr=tail)
    here = where(tail)
    others = _where_now(procs, stacks, [r for r in range(world_size)
                                        if r != rank and r not in results])
    peers = "; ".join(f"rank {r} was {w}" for r, w in sorted(others.items()))
    done = f"; rank(s) {sorted(results)} had returned" if results else ""
    return LaunchError(rank, f"mismatched collective: rank {rank} of {world_size} {how} "
                             f"{here or 'in a collective'}: {gloo}"
                             + (f"; {peers}" if peers else "") + done
                             + "; all ranks were ended", stderr=tail)


_NOWHERE = Where(None, "")


def _skipped(error, results, world_size) -> LaunchError:
    """A rank failed in a collective because its peers closed the connection, and some ranks
    had returned: they did not make that call (the ranks' calls differ)."""
    _, tb, line, _, _, rank = error
    at = where(tb)
    return LaunchError(rank, f"rank {rank} of {world_size} failed {at or ''}: {line}; rank(s) "
                             f"{sorted(results)} had already returned, so they did not make "
                             f"this call (a skipped or extra collective)", tb)


def _error(error, world_size: int) -> LaunchError:
    _, tb, line, _, _, rank = error
    return LaunchError(rank, f"rank {rank} of {world_size} failed: {line}", tb)
