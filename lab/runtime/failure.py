"""How a failed rank is described: the cause told apart from its echoes, the exception's own
line, and the stderr a rank wrote before it died (kept by the caller, not lost with the rank).

When one rank dies, its peers fail too, with "Connection reset by peer" from inside a
collective: such peer-loss errors are echoes. The cause is a real exception, or a rank killed by
a signal (a C++ ``abort()`` inside gloo is SIGABRT); its stderr (the C++ message, and the Python
stack ``faulthandler`` dumps on a fatal signal) goes to a file the caller reads.
"""
from __future__ import annotations

import faulthandler
import os
import signal
import sys
from collections import deque

STDERR_LINES = 60  # how much of a dead rank's stderr a LaunchError shows


class StderrTail:
    """One rank's stderr, redirected to a file: new bytes are forwarded to the caller's fd 2
    (where the rank's stderr went before), and the last lines are kept for the error."""

    def __init__(self, path: str):
        self.path, self.offset = path, 0
        self.lines: deque[str] = deque(maxlen=STDERR_LINES)
        self.partial = ""
        open(path, "wb").close()

    def poll(self) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return
        if not data:
            return
        self.offset += len(data)
        try:
            os.write(2, data)
        except OSError:
            pass
        text = self.partial + data.decode("utf-8", "replace")
        *done, self.partial = text.split("\n")
        self.lines.extend(done)

    def tail(self) -> str:
        self.poll()
        return "\n".join([*self.lines, self.partial] if self.partial else self.lines).strip("\n")


# Peer-loss errors (gloo, NCCL, the TCPStore): what a rank sees when another one died.
_ECHOES = ("Connection reset by peer", "Connection closed by peer", "Broken pipe",
           "remote process exited", "NCCL communicator was aborted", "Connection refused")


def is_echo(exc: BaseException) -> bool:
    """A peer-loss error: the symptom of another rank's failure, not a cause."""
    return any(m in str(exc) for m in _ECHOES)


def not_connected(line: str) -> bool:
    """Gloo could not connect a rank to its peers while forming the group ("Gloo connectFullMesh
    failed with ... Connection closed by peer", or "... Connect timeout"): a flake of a loaded
    machine when every rank says so, since none had failed before."""
    return "connectFullMesh" in line


def summary(exc: BaseException) -> str:
    """The exception's own line: its type and the first line of its message (torch appends
    an "At:" trailer of Python frames to C++ errors; that is not the message)."""
    kind = type(exc).__qualname__
    if type(exc).__module__ not in ("builtins", "__main__"):
        kind = f"{type(exc).__module__}.{kind}"
    first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    return f"{kind}: {first}" if first else kind


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def stderr_to(path: str) -> None:
    """Send this rank's fd 2 (Python's and C++'s stderr) to ``path``, and have a fatal signal
    (SIGSEGV, SIGABRT...) dump the Python stack of every thread there first."""
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    os.dup2(fd, 2)
    os.close(fd)
    faulthandler.enable(all_threads=True)
