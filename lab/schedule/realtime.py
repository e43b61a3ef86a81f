"""Real-time priority for the threads that move bytes, where the process may set it.

A NIC moves a message the moment it is handed one; a communication thread on a CPU shared with
compute moves it when the scheduler next runs it, and a real call waits for every rank's thread
to be run. Under ``SCHED_FIFO`` a thread that wakes runs at once, ahead of the compute threads
(the kernel still keeps 5% of each second for everything else). Setting it needs root or
``CAP_SYS_NICE``; elsewhere nothing changes, quietly, and :func:`promote` says so.
"""
from __future__ import annotations

import os

PRIORITY = 10   # SCHED_FIFO priority (1-99): above every normal thread, below the kernel's own
_GLOO = ("gloo", "pt_gloo")   # the thread names of gloo's I/O loop and its work queue


def promote(tid: int = 0) -> bool:
    """``SCHED_FIFO`` for thread ``tid`` (0: the calling thread); False where not permitted."""
    if not hasattr(os, "sched_setscheduler"):
        return False
    try:
        os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(PRIORITY))
        return True
    except (OSError, ValueError):
        return False


def demote(tid: int = 0) -> None:
    """Back to the normal policy (a no-op where nothing was promoted)."""
    try:
        if os.sched_getscheduler(tid) == os.SCHED_FIFO:
            os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
    except (OSError, ValueError, AttributeError):
        pass


def gloo_threads() -> list[int]:
    """The ids of this process's gloo threads (its TCP loop and work queue), on Linux."""
    out = []
    try:
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/comm") as f:
                if f.read().strip().startswith(_GLOO):
                    out.append(int(tid))
    except OSError:
        pass
    return out


def promote_gloo() -> bool:
    """``SCHED_FIFO`` for every gloo thread of this process; True if all (and any) were set."""
    tids = gloo_threads()
    return bool(tids) and all([promote(t) for t in tids])
