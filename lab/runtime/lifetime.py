"""How long a rank lives: no longer than its launch, nor than the process that launched it.

Nothing is left behind. Each rank leads a process group of its own, so that what it starts (a
DataLoader's workers, a launch of its own: ranks are not daemonic, so they may have children)
is ended with it when the launch ends, whichever way (:func:`_end_all`). Each rank also watches
the caller (a pidfd on Linux, else a poll) and kills its whole group the moment the caller is
gone, killed by SIGKILL or SIGTERM as a notebook kernel's restart does (:func:`_die_with`):
ranks forked from the forkserver are not the caller's children, so a parent-death signal would
not reach them, and the forkserver itself takes one (:mod:`lab.runtime.server`). Ctrl-C in a
terminal reaches only the caller, whose ``KeyboardInterrupt`` ends the ranks.
"""
from __future__ import annotations

import ctypes
import os
import select
import signal
import _thread
import time


def _end_all(procs) -> None:
    """End every rank and every process it started (its process group): SIGTERM, then after
    2 s SIGKILL; then SIGKILL to what is left in each rank's group (the children of a rank
    that had already ended)."""
    for p in procs:
        if p.is_alive() and not _signal_group(p, signal.SIGTERM):
            p.terminate()
    deadline = time.monotonic() + 2.0
    for p in procs:
        if p.pid is None:  # never started (start() itself failed)
            continue
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            if not _signal_group(p, signal.SIGKILL):
                p.kill()
            p.join()
    for p in procs:
        if p.pid is not None:
            _signal_group(p, signal.SIGKILL)


def _signal_group(p, sig) -> bool:
    """Send ``sig`` to the process group rank ``p`` leads; False if there is none (the rank
    had not made it yet, or it and everything it started are gone). A group outlives its
    leader while a member is left, and its id is not reused meanwhile."""
    try:
        os.killpg(p.pid, sig)
        return True
    except (ProcessLookupError, PermissionError, AttributeError):
        return False


def _die_with_parent() -> None:
    """Linux: get SIGKILL when the parent dies (the caller, under ``spawn``; the forkserver,
    under ``forkserver``)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _own_group() -> bool:
    """Make this rank the leader of a process group of its own (what it starts joins it)."""
    try:
        os.setpgid(0, 0)
    except (OSError, AttributeError):
        return False
    return os.getpgrp() == os.getpid()


def _die_with(caller: int, own_group: bool) -> None:
    """End this rank, and its process group when it leads one, the moment the process that
    launched it (``caller``) is gone: a thread waits on a pidfd of the caller (Linux 5.3+;
    elsewhere it polls twice a second, and the rank also takes a parent-death signal).

    With a pidfd the rank takes no parent-death signal: the forkserver dies with the caller
    (:mod:`lab.runtime.server`), and the signal would kill the rank before its thread could
    end the processes it started."""
    def end():
        try:
            if own_group:
                os.killpg(os.getpid(), signal.SIGKILL)
        finally:
            os.kill(os.getpid(), signal.SIGKILL)

    try:
        fd = os.pidfd_open(caller)
    except ProcessLookupError:
        end()   # gone already
    except (AttributeError, OSError):
        fd = None
        _die_with_parent()

    def watch():
        if fd is not None:
            select.select([fd], [], [])
        else:
            while True:
                time.sleep(0.5)
                try:
                    os.kill(caller, 0)
                except ProcessLookupError:
                    break
                except PermissionError:
                    pass
        end()
    # the low-level start: threading.Thread.start waits until the thread runs (a context
    # switch per rank, a millisecond on a loaded machine), this one does not
    _thread.start_new_thread(watch, ())
