"""``launch(fn, world_size)``: run ``fn(ctx, *args)`` in N real processes, results back.

Ranks are forked from a clean forkserver that imported torch once (a plain ``fork`` of a
kernel that ran torch can deadlock; ``spawn`` pays seconds per rank to import torch again) and
join a ``torch.distributed`` group through a TCPStore that the caller hosts on a port the OS
picks, so back-to-back launches never race for a port. ``fn`` and its arguments travel
by value with cloudpickle, so functions defined in a notebook work. Results come back pickled
to bytes (tensors never travel through multiprocessing queues), and the caller drains the
queue while it waits, so big results cannot deadlock.

If any rank raises, dies (even by SIGKILL) or the launch makes no progress for ``timeout``
seconds, every rank is ended and one :class:`LaunchError` names the rank and carries its
traceback. Progress is a report from rank 0 (:meth:`RankContext.progress`, once per training
step), so a long run that keeps stepping is never mistaken for a hang; a function that reports
nothing must finish within ``timeout``. Ranks also die with the caller (PR_SET_PDEATHSIG), so
no orphans are left behind.

Peers that lost their connection to a failed rank are echoes, not the cause (see
:mod:`lab.runtime.failure`). Gloo on a loaded machine now and then fails to connect its full
mesh of ranks although no rank failed (a known flake of gloo's TCP transport): when every rank
reports that while forming the group, before ``fn`` ran anywhere, the launch starts again once,
with new processes and a new store, and says so on stderr. Each rank's stderr goes to a file the
caller reads and forwards to its own stderr as it comes, so the last lines of a rank killed by a
signal appear in the error.
"""
from __future__ import annotations

import ctypes
import os
import queue as queue_mod
import shutil
import signal
import sys
import tempfile
import time
import traceback
from datetime import timedelta
from typing import Any, Callable

import cloudpickle
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ..comm import Collective, Network
from .allocator import keep_freed_memory
from .context import RankContext, pick_backend, rank_device
from .failure import StderrTail, is_echo, not_connected, signal_name, stderr_to, summary

#: Seconds a launch may run before every rank is ended and a LaunchError raised.
DEFAULT_TIMEOUT = 60.0
#: How many times a launch is tried when gloo could not connect its ranks (see the module doc).
FORM_TRIES = 2


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


def launch(fn: Callable[..., Any], world_size: int, *args, backend: str = "auto",
           device: str = "auto", timeout: float = DEFAULT_TIMEOUT, threads: int = 1,
           network: Network | str | None = None, progress: bool = True,
           start_method: str = "forkserver", **kwargs) -> list:
    """Run ``fn(ctx, *args, **kwargs)`` on ``world_size`` ranks; return results by rank."""
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    if not (isinstance(timeout, (int, float)) and timeout > 0):
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive int, got {threads!r}")
    network = Network.parse(network)
    backend, kind = pick_backend(world_size, backend, device)
    try:
        blob = cloudpickle.dumps((fn, args, kwargs))
    except Exception as e:  # a lock, an open file, a generator...
        raise TypeError(f"fn or its arguments cannot be sent to worker processes ({e}). Pass "
                        "plain data, and build unpicklable objects inside fn.") from e
    ctx = _context(start_method)
    for attempt in range(1, FORM_TRIES + 1):
        try:
            return _launch_once(ctx, blob, world_size, backend, kind, timeout, threads, network,
                                progress)
        except _NotConnected as e:
            if attempt == FORM_TRIES:
                raise e.error from None
            why = str(e.error).splitlines()[0]
            print(f"lab.launch: gloo could not connect the {world_size} ranks ({why}); no rank "
                  "had started; launching again", file=sys.stderr, flush=True)


class _NotConnected(Exception):
    """Every rank failed to connect the group: ``error`` is the LaunchError to raise if the
    last try fails too."""

    def __init__(self, error: LaunchError):
        super().__init__(str(error))
        self.error = error


def _launch_once(ctx, blob, world_size, backend, kind, timeout, threads, network, progress):
    store = dist.TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=timeout),
                          wait_for_workers=False)
    results_q = ctx.Queue()
    records: list = []
    logdir = tempfile.mkdtemp(prefix="lab-launch-")
    stderrs = [StderrTail(os.path.join(logdir, f"rank{r}.stderr")) for r in range(world_size)]
    procs = [ctx.Process(target=_rank_main, daemon=True, name=f"lab-rank-{r}",
                         args=(r, world_size, store.port, blob, results_q, backend, kind,
                               threads, timeout, network, stderrs[r].path))
             for r in range(world_size)]
    try:
        for p in procs:
            p.start()
        return _collect(procs, results_q, world_size, timeout, progress, stderrs, records)
    except LaunchError as e:
        e.records = records  # a failed run keeps what its ranks streamed
        raise
    finally:
        _end_all(procs)
        for tail in stderrs:
            tail.poll()  # forward what the ranks wrote last
        results_q.close()
        shutil.rmtree(logdir, ignore_errors=True)
        del store


def _context(method: str):
    """``forkserver`` (default): a clean server process imports torch once, and each rank is
    forked from it in milliseconds; it never ran a torch kernel, so the fork-after-threads
    deadlock cannot happen. ``spawn``: a fresh interpreter per rank (seconds each)."""
    if method not in ("forkserver", "spawn"):
        raise ValueError(f"start_method must be 'forkserver' or 'spawn', got {method!r}")
    if method == "forkserver" and "forkserver" not in mp.get_all_start_methods():
        method = "spawn"
    ctx = mp.get_context(method)
    if method == "forkserver":
        # torch._dynamo is what the first optimizer construction imports (800+ modules, ~1 s
        # per rank, several seconds when ranks compete for two cores): pay it once here. So is
        # lab.train (every rank of a training run unpickles into it): 0.45 -> 0.15 s per launch
        # of a one-step run on 2 ranks. The server imports it once, when a process first
        # launches: lab code edited after that reaches its ranks only in a new process.
        ctx.set_forkserver_preload(["torch", "torch.distributed", "torch._dynamo", "cloudpickle",
                                    "lab.train"])
    return ctx


def _collect(procs, q, world_size, timeout, progress, stderrs, records) -> list:
    results: dict[int, Any] = {}
    errors: list[tuple] = []  # (time, traceback, summary, is_echo, joined, rank)
    deaths: dict[int, int] = {}
    bar = None
    deadline = time.monotonic() + timeout
    first_failure = None

    def take(wait: float) -> bool:
        nonlocal bar, deadline
        try:
            msg = q.get(timeout=wait)
        except queue_mod.Empty:
            return False
        kind, rank = msg[0], msg[1]
        if kind == "ok":
            results[rank] = cloudpickle.loads(msg[3])
        elif kind == "error":
            errors.append(msg[2:] + (rank,))
        elif kind == "record":
            records.append((rank, msg[2]))
        elif kind == "log":
            print(f"[rank {rank}] {msg[2]}", flush=True)
        elif kind == "progress":
            deadline = time.monotonic() + timeout  # a hang is time without progress
            if progress:
                bar = _advance(bar, *msg[2:])
        return True

    try:
        while len(results) < world_size:
            if take(0.05):
                continue  # drain everything queued before judging liveness
            for tail in stderrs:
                tail.poll()
            told = {e[-1] for e in errors} | set(deaths) | set(results)
            dead = [r for r, p in enumerate(procs) if r not in told and not p.is_alive()]
            if dead:
                while take(0.05):  # a rank's last message is in the pipe before it exits
                    pass
                told = {e[-1] for e in errors} | set(deaths) | set(results)
                deaths.update((r, procs[r].exitcode) for r in dead if r not in told)
            if (errors or deaths) and first_failure is None:
                first_failure = time.monotonic()
            # After a failure, give the other ranks a moment to report, so the cause can be
            # told apart from its echoes (peers that lost their connection to it).
            if first_failure is not None:
                told = {e[-1] for e in errors} | set(deaths) | set(results)
                if len(told) == world_size or time.monotonic() - first_failure > 1.0:
                    break
            if time.monotonic() > deadline:
                pending = [r for r in range(world_size) if r not in results]
                raise LaunchError(pending[0], f"timeout: rank(s) {pending} of {world_size} made "
                                  f"no progress for {timeout:g} s (a hang, a deadlock, or a "
                                  f"mismatched collective); all ranks were ended")
    finally:
        if bar is not None:
            bar.close()
    if (len(errors) == world_size and not deaths
            and all(not e[4] and not_connected(e[2]) for e in errors)):
        raise _NotConnected(_error(min(errors), world_size))   # nothing ran: worth a retry
    causes = [e for e in errors if not e[3]]
    if causes:
        raise _error(min(causes), world_size)  # the earliest real exception
    if deaths:
        # a signal is a cause (SIGABRT from a C++ abort, SIGSEGV, SIGKILL); an exit code
        # without a message is more likely an echo
        rank, code = min(deaths.items(), key=lambda rc: (not (rc[1] or 0) < 0, rc[0]))
        how = (f"was killed by {signal_name(-code)}" if code is not None and code < 0
               else f"exited with code {code} without returning a result (if you launched "
                    f"from a script, put the launching code under `if __name__ == '__main__':`)")
        raise LaunchError(rank, f"rank {rank} of {world_size} {how}; all ranks were ended",
                          stderr=stderrs[rank].tail())
    if errors:
        raise _error(min(errors), world_size)  # only echoes: the earliest one
    return [results[r] for r in range(world_size)]


def _error(error, world_size: int) -> LaunchError:
    _, tb, line, _, _, rank = error
    return LaunchError(rank, f"rank {rank} of {world_size} failed: {line}", tb)


def _advance(bar, done, total, desc):
    if bar is not None and desc and bar.desc != desc:
        bar.close()
        bar = None
    if bar is None:
        from tqdm.auto import tqdm
        bar = tqdm(total=total, desc=desc or "steps", leave=False)
    bar.total = total
    bar.update(done - bar.n)
    return bar


def _end_all(procs) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + 2.0
    for p in procs:
        if p.pid is None:  # never started (start() itself failed)
            continue
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()


def _die_with_parent() -> None:
    """Linux: get SIGKILL when the launching process dies, so no rank is orphaned."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _rank_main(rank, world_size, port, blob, q, backend, kind, threads, timeout, network,
               stderr_path):
    _die_with_parent()
    stderr_to(stderr_path)
    keep_freed_memory()  # gradient-sized temporaries every step: reuse them, no page faults
    torch.set_num_threads(threads)
    code, joined = 0, False
    try:
        fn, args, kwargs = cloudpickle.loads(blob)
        store = dist.TCPStore("127.0.0.1", port, None, False, timedelta(seconds=timeout))
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                                timeout=timedelta(seconds=timeout))
        joined = True
        ctx = RankContext(rank, world_size, rank_device(rank, kind), backend,
                          Collective(network=network), _queue=q)
        result = fn(ctx, *args, **kwargs)
        q.put(("ok", rank, time.time(), cloudpickle.dumps(result)))
    except BaseException as e:
        q.put(("error", rank, time.time(), traceback.format_exc(), summary(e), is_echo(e),
               joined))
        code = 1
    finally:
        q.close()
        q.join_thread()  # make sure the message is out before we go
    if code == 0 and dist.is_initialized():
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip interpreter teardown: a dead peer cannot hang us there
