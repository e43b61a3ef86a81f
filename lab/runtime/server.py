"""Imported once by the launch's forkserver as it starts (a preload module): it dies with the
process that started it.

The forkserver is the caller's child, and the ranks are the forkserver's. When the caller is
killed (SIGKILL, SIGTERM: a notebook kernel's restart), each rank notices on its own and ends
its process group (:func:`lab.runtime.lifetime._die_with`); the forkserver would only notice when
the last of them is gone and then tear its interpreter down, torch and all, which takes
seconds. With a parent-death signal it goes at once. The caller names itself in
``$LAB_LAUNCH_CALLER`` before the forkserver is started; only a process whose parent is that
caller sets the signal, so importing this module anywhere else changes nothing.
"""
from __future__ import annotations

import ctypes
import os
import signal

ENV = "LAB_LAUNCH_CALLER"


def die_with_parent() -> bool:
    """Get SIGKILL when the parent dies, if this process is the forkserver of the caller named
    in ``$LAB_LAUNCH_CALLER``; True if it was set."""
    caller = os.environ.get(ENV, "")
    if not caller.isdigit() or int(caller) != os.getppid():
        return False
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return False
    if os.getppid() != int(caller):   # the caller died before the signal was set
        os._exit(0)
    return True


die_with_parent()
