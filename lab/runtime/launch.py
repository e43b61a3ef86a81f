"""``launch(fn, world_size)``: run ``fn(ctx, *args)`` in N real processes, results back.

Ranks are forked from a clean forkserver that imported torch once (:mod:`lab.runtime.rank`) and
join a ``torch.distributed`` group through a TCPStore that the caller hosts on a port the OS
picks, so back-to-back launches never race for a port. ``fn`` and its arguments travel
by value with cloudpickle, so functions defined in a notebook work. Results come back pickled
to bytes (tensors never travel through multiprocessing queues), and the caller drains the
queue while it waits, so big results cannot deadlock.

If any rank raises, dies (even by SIGKILL) or the launch makes no progress for ``timeout``
seconds (``float("inf")``: never), every rank is ended and one :class:`LaunchError` names the
rank and carries its traceback (:mod:`lab.runtime.report`: which rank, and why). Progress is a
report from rank 0 (:meth:`RankContext.progress`, once per training step), so a long run that
keeps stepping is never mistaken for a hang; a function that reports nothing must finish
within ``timeout``. Nothing is left behind (:mod:`lab.runtime.lifetime`).

Gloo on a loaded machine now and then fails to connect its full mesh of ranks although no rank
failed (a known flake of gloo's TCP transport): when every rank reports that while forming the
group, before ``fn`` ran anywhere, the launch starts again once, with new processes and a new
store, and says so on stderr. Each rank's stderr goes to a file the caller reads and forwards
to its own stderr as it comes, so the last lines of a rank killed by a signal appear in the
error.
"""
from __future__ import annotations

import os
import queue as queue_mod
import shutil
import sys
import tempfile
import time
from typing import Any, Callable

import cloudpickle
import torch.distributed as dist

from ..comm import Network
from .context import pick_backend, timeout_delta as _td
from .failure import StderrTail, not_connected, waited, where
from .lifetime import _die_with, _die_with_parent, _end_all, _own_group, _signal_group  # noqa: F401
from .rank import _context, _kernel_cluster, _rank_main
from .report import (_NOWHERE, LaunchError, _died, _error, _names, _NotConnected,  # noqa: F401
                     _skipped, _stopped, _where_now)

#: Seconds a launch may run before every rank is ended and a LaunchError raised.
DEFAULT_TIMEOUT = 60.0
#: How many times a launch is tried when gloo could not connect its ranks (see the module doc).
FORM_TRIES = 2


def launch(fn: Callable[..., Any], world_size: int, *args, backend: str = "auto",
           device: str = "auto", timeout: float = DEFAULT_TIMEOUT, threads: int = 1,
           network: Network | str | None = None, progress: bool = True,
           start_method: str = "forkserver", link: str = "model", **kwargs) -> list:
    """Run ``fn(ctx, *args, **kwargs)`` on ``world_size`` ranks; return results by rank.

    ``link="kernel"``: the ranks run as nodes of a miniature cluster (:mod:`lab.comm.kernel`:
    a network namespace each, NICs shaped to ``network``'s bandwidth), made before they start
    and removed whatever happens; ``"model"`` (the default): the emulated link."""
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    if isinstance(timeout, bool) or not (isinstance(timeout, (int, float)) and timeout > 0):
        raise ValueError(f"timeout must be a positive number of seconds (float('inf'): no "
                         f"timeout), got {timeout!r}")
    if not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive int, got {threads!r}")
    network = Network.parse(network)
    if link not in ("model", "kernel"):
        raise ValueError(f"link must be one of ('model', 'kernel'), got {link!r}")
    if link == "kernel" and network is None:
        raise ValueError("link='kernel' needs a network (its NICs are shaped to its bandwidth), "
                         "e.g. network='1Gbps,0.1ms'")
    backend, kind = pick_backend(world_size, backend, device)
    try:
        blob = cloudpickle.dumps((fn, args, kwargs))
    except Exception as e:  # a lock, an open file, a generator...
        raise TypeError(f"fn or its arguments cannot be sent to worker processes ({e}). Pass "
                        "plain data, and build unpicklable objects inside fn.") from e
    ctx = _context(start_method)
    cluster = _kernel_cluster(world_size, network) if link == "kernel" else None
    try:
        for attempt in range(1, FORM_TRIES + 1):
            try:
                return _launch_once(ctx, blob, world_size, backend, kind, timeout, threads,
                                    network, progress, cluster)
            except _NotConnected as e:
                if attempt == FORM_TRIES:
                    raise e.error from None
                why = str(e.error).splitlines()[0]
                print(f"lab.launch: gloo could not connect the {world_size} ranks ({why}); no "
                      "rank had started; launching again", file=sys.stderr, flush=True)
    finally:
        if cluster is not None:
            cluster.down()


def _launch_once(ctx, blob, world_size, backend, kind, timeout, threads, network, progress,
                 cluster=None):
    # on a kernel link rank 0 hosts the store, on its node's NIC, where every rank reaches it
    store = None if cluster else dist.TCPStore("127.0.0.1", 0, None, True, _td(timeout),
                                               wait_for_workers=False)
    results_q = ctx.Queue()
    records: list = []
    logdir = tempfile.mkdtemp(prefix="lab-launch-")
    stderrs = [StderrTail(os.path.join(logdir, f"rank{r}.stderr")) for r in range(world_size)]
    stacks = [os.path.join(logdir, f"rank{r}.stacks") for r in range(world_size)]
    # not daemonic: a rank may start processes of its own (they die with its process group)
    procs = [ctx.Process(target=_rank_main, daemon=False, name=f"lab-rank-{r}",
                         args=(r, world_size, store.port if store else cluster.STORE_PORT, blob,
                               results_q, backend, kind, threads, timeout, network,
                               stderrs[r].path, cluster,
                               os.getpid(), stacks[r]))
             for r in range(world_size)]
    try:
        for p in procs:
            p.start()
        return _collect(procs, results_q, world_size, timeout, progress, stderrs, records,
                        stacks)
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


def _collect(procs, q, world_size, timeout, progress, stderrs, records, stacks) -> list:
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
                raise _stopped(procs, stacks, pending, results, world_size,
                               f"made no progress for {timeout:g} s")
    finally:
        if bar is not None:
            bar.close()
    # Nothing ran (no rank joined the group, none returned or died) and gloo failed to connect
    # its mesh: worth a retry. The ranks that have not reported yet are still connecting (a
    # loaded machine can take longer than the second given above for them to fail too).
    if (errors and not results and not deaths and all(not e[4] for e in errors)
            and any(not_connected(e[2]) for e in errors)):
        raise _NotConnected(_error(min(errors), world_size))
    # a collective that timed out waiting is, like an echo, a symptom of the peer it waited for
    causes = [e for e in errors if not e[3] and not waited(e[2], e[1])]
    if causes:
        raise _error(min(causes), world_size)  # the earliest real exception
    if deaths:
        # a signal is a cause (SIGABRT from a C++ abort, SIGSEGV, SIGKILL); an exit code
        # without a message is more likely an echo
        rank, code = min(deaths.items(), key=lambda rc: (not (rc[1] or 0) < 0, rc[0]))
        raise _died(procs, stacks, rank, code, stderrs[rank].tail(), results, world_size)
    told = {e[-1] for e in errors} | set(results)
    waiting = [e for e in errors if waited(e[2], e[1])]
    if waiting:   # the ranks still running show which one the others waited for
        raise _stopped(procs, stacks, [r for r in range(world_size) if r not in told], results,
                       world_size, "stopped", waiting)
    skipped = [e for e in errors if e[4] and (where(e[1]) or _NOWHERE).collective]
    if skipped and results:   # in a collective (the group was formed) that returned ranks left
        raise _skipped(min(skipped), results, world_size)
    if errors:
        raise _error(min(errors), world_size)  # only echoes: the earliest one
    return [results[r] for r in range(world_size)]


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
