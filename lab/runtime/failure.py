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
import re
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
        """Forward what the rank wrote since the last poll and keep its last lines; a file not
        readable (yet) is skipped until the next poll."""
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
        """The rank's last stderr lines (after a final :meth:`poll`), for its error message."""
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
    machine when the ranks that report it had not joined the group (none had run anything)."""
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
    """``"SIGSEGV"`` for 11 and so on; ``"signal N"`` for a number with no name."""
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


# -- where a rank is: its Python stack, dumped on request or on a fatal signal ----------------
#: The signal on which a rank writes the stack of each of its threads to its stack file
#: (``faulthandler``, so a rank blocked in C++, e.g. inside a gloo collective, answers too).
STACK_SIGNAL = signal.SIGUSR1

def stacks_to(path: str) -> None:
    """In a rank: on :data:`STACK_SIGNAL`, dump every thread's Python stack to ``path`` (a
    descriptor kept open for the life of the rank: faulthandler writes to it)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
    faulthandler.register(STACK_SIGNAL, file=fd, all_threads=True, chain=False)


# c10d's Python names of the collectives (what gloo and NCCL run), and lab.comm.Collective's
_C10D = {"all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "broadcast",
         "reduce_scatter", "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "barrier",
         "send", "recv", "isend", "irecv", "gather", "scatter", "reduce", "wait",
         "broadcast_object_list", "batch_isend_irecv", "monitored_barrier"}
_FRAME = re.compile(r'File "([^"]+)", line (\d+),? in (\S+)')
#: the files of lab.comm.Collective, whose public methods are lab's names of the collectives
_LAB_OPS = ("lab/comm/collective.py", "lab/comm/channel.py", "lab/comm/gathers.py",
            "lab/comm/p2p.py")
_INTERNAL = ("/torch/", *(f"/{f}" for f in _LAB_OPS), "/lab/runtime/", "/threading.py",
             "/multiprocessing/", "/concurrent/futures/", "<frozen ", "<string>")


class Where:
    """Where a rank's Python stack is: ``collective`` (lab's or c10d's name of the collective
    a thread of it waits in, else None) and ``site`` (``file:line in function`` of the code
    that called it, or where its main thread is when not in a collective)."""

    def __init__(self, collective: str | None, site: str):
        self.collective, self.site = collective, site

    def __str__(self) -> str:
        return f"in {self.collective} (called at {self.site})" if self.collective \
            else f"at {self.site}, not in a collective"


def _threads(text: str) -> list[list[tuple[str, int, str]]]:
    """The frames (most recent first) of each thread in a faulthandler dump, or of a Python
    traceback (most recent last, reversed here)."""
    if "Traceback (most recent call last)" in text and "(most recent call first)" not in text:
        frames = [(f, int(n), fn) for f, n, fn in _FRAME.findall(text)]
        return [frames[::-1]] if frames else []
    out: list = []
    for line in text.splitlines():
        if "(most recent call first)" in line:
            out.append([])
        elif out:
            m = _FRAME.search(line)
            if m:
                out[-1].append((m.group(1), int(m.group(2)), m.group(3)))
    return [t for t in out if t]


def _site(frames) -> str:
    user = next((f for f in frames if not any(s in f[0] for s in _INTERNAL)), None)
    f, n, fn = user or frames[0]
    return f"{f}:{n} in {fn}"


def where(text: str) -> Where | None:
    """Where the stack dump or traceback ``text`` shows a rank: the collective it waits in
    (any thread: an overlapping schedule's exchange runs on one) and its call site; else its
    main thread's innermost frame of user code. None if ``text`` holds no stack."""
    threads = _threads(text)
    if not threads:
        return None
    for frames in threads:
        for i, (f, _, fn) in enumerate(frames):
            lab_op = f.endswith(_LAB_OPS) and not fn.startswith(("_", "<"))
            if lab_op or (f.endswith("distributed_c10d.py") and fn in _C10D):
                if not lab_op:   # lab's name of it, if it came through lab.comm
                    fn = next((g for h, _, g in frames[i:] if h.endswith(_LAB_OPS)
                               and not g.startswith(("_", "<"))), fn)
                return Where(fn, _site(frames[i:]))
    main = next((t for t in threads if any(fn == "_rank_main" for _, _, fn in t)), threads[0])
    return Where(None, _site(main))


_GLOO = re.compile(r"what\(\):\s+\[enforce fail at [^\]]*\]\s*(.+)")
_SIZES = re.compile(r"(\d+) vs (\d+)\. Received data size doesn't match expected size")


def gloo_error(text: str) -> str | None:
    """The message of the C++ exception that made gloo abort a rank (in its stderr), said
    plainly where we know it: a size mismatch is what ranks that pass tensors of different
    sizes or dtypes to the same collective cause."""
    m = _GLOO.search(text)
    if m is None:
        return None
    sizes = _SIZES.search(m.group(1))
    if sizes:
        return (f"gloo received {sizes.group(1)} bytes where this rank expected "
                f"{sizes.group(2)}: the ranks passed tensors of different sizes or dtypes")
    return f"gloo: {m.group(1).strip()}"


#: What a rank sees when it waited too long on a peer inside a collective (gloo, NCCL): a
#: symptom of a peer that stopped, like an echo.
_WAITED = ("Timed out waiting", "Watchdog caught collective operation timeout",
           "wait timeout", "Socket Timeout")


def waited(line: str, tb: str = "") -> bool:
    """A collective that timed out waiting for its peers (``line``: the error's summary, ``tb``
    its traceback, which must show it raised inside a collective): the peer that stopped is the
    cause, not this rank."""
    if not any(m in line for m in _WAITED):
        return False
    w = where(tb)
    return w is not None and w.collective is not None
