"""``launch(fn, world_size)``: run ``fn(ctx, *args)`` in N real processes, results back.

Ranks are forked from a clean forkserver that imported torch once (a plain ``fork`` of a
kernel that ran torch can deadlock; ``spawn`` pays seconds per rank to import torch again) and
join a ``torch.distributed`` group through a TCPStore that the caller hosts on a port the OS
picks, so back-to-back launches never race for a port. ``fn`` and its arguments travel
by value with cloudpickle, so functions defined in a notebook work. Results come back pickled
to bytes (tensors never travel through multiprocessing queues), and the caller drains the
queue while it waits, so big results cannot deadlock.

If any rank raises, dies (even by SIGKILL) or the launch makes no progress for ``timeout``
seconds (``float("inf")``: never), every rank is ended and one :class:`LaunchError` names the
rank and carries its traceback. Progress is a report from rank 0 (:meth:`RankContext.progress`,
once per training step), so a long run that keeps stepping is never mistaken for a hang; a
function that reports nothing must finish within ``timeout``. A timeout names the rank that
stopped: each rank still running is asked for its Python stack (``faulthandler`` on SIGUSR1,
answered even from inside a C++ collective), and a rank that is not waiting in a collective is
the one its peers wait for. A rank that gloo aborts because the ranks' calls do not match
(different sizes or dtypes) is reported with the collective, its call site and gloo's reason;
a rank that fails because a peer had already returned is told apart as a skipped collective.

Nothing is left behind. Each rank leads a process group of its own, so that what it starts (a
DataLoader's workers, a launch of its own: ranks are not daemonic, so they may have children)
is ended with it when the launch ends, whichever way. Each rank also watches the caller (a
pidfd on Linux, else a poll) and kills its whole group the moment the caller is gone, killed
by SIGKILL or SIGTERM as a notebook kernel's restart does: ranks forked from the forkserver
are not the caller's children, so a parent-death signal would not reach them, and the
forkserver itself takes one (:mod:`lab.runtime.server`). Ctrl-C in a terminal reaches only
the caller, whose ``KeyboardInterrupt`` ends the ranks.

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
import select
import shutil
import signal
import sys
import _thread
import tempfile
import time
import traceback
from typing import Any, Callable

import cloudpickle
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ..comm import Collective, Network
from . import server as _server
from .allocator import keep_freed_memory
from .context import RankContext, pick_backend, rank_device, timeout_delta as _td
from .failure import (STACK_SIGNAL, StderrTail, Where, gloo_error, is_echo, not_connected,
                      signal_name, stacks_to, stderr_to, summary, waited, where)

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


def _kernel_cluster(world_size, network):
    """The kernel link's cluster, made (or a RuntimeError saying why it cannot be)."""
    from ..comm.kernel import KernelCluster
    cluster = KernelCluster(world_size, network).up()
    if cluster.setup_s > 1.0:
        print(f"lab.launch: kernel link for {world_size} ranks set up in {cluster.setup_s:.2f} s",
              file=sys.stderr, flush=True)
    return cluster


class _NotConnected(Exception):
    """Every rank failed to connect the group: ``error`` is the LaunchError to raise if the
    last try fails too."""

    def __init__(self, error: LaunchError):
        super().__init__(str(error))
        self.error = error


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
        # lab.runtime.server first: the server dies with the caller (see that module)
        os.environ[_server.ENV] = str(os.getpid())
        ctx.set_forkserver_preload(["lab.runtime.server", "torch", "torch.distributed",
                                    "torch._dynamo", "cloudpickle", "lab.train"])
    return ctx


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


def _rank_main(rank, world_size, port, blob, q, backend, kind, threads, timeout, network,
               stderr_path, cluster=None, caller=None, stacks_path=None):
    own = _own_group()
    if caller is not None:
        _die_with(caller, own)
    else:
        _die_with_parent()
    if stacks_path is not None:
        stacks_to(stacks_path)
    stderr_to(stderr_path)
    keep_freed_memory()  # gradient-sized temporaries every step: reuse them, no page faults
    torch.set_num_threads(threads)
    code, joined = 0, False
    try:
        fn, args, kwargs = cloudpickle.loads(blob)
        if cluster is not None:  # a node of the kernel link: its namespace, its NIC
            cluster.join(rank)
        host, master = (cluster.address(0), rank == 0) if cluster else ("127.0.0.1", False)
        store = dist.TCPStore(host, port, world_size if master else None, master, _td(timeout),
                              wait_for_workers=False)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                                timeout=_td(timeout))
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
