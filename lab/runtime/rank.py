"""The rank processes of a launch: where they are started from, and what each one runs.

Ranks are forked from a clean forkserver that imported torch once (a plain ``fork`` of a
kernel that ran torch can deadlock; ``spawn`` pays seconds per rank to import torch again)
(:func:`_context`). Each rank (:func:`_rank_main`) ties its life to the launch
(:mod:`lab.runtime.lifetime`), sends its stderr to a file the caller forwards, joins the
``torch.distributed`` group through the caller's TCPStore (on a kernel link, rank 0's, on its
node's NIC: :func:`_kernel_cluster`), runs ``fn`` and puts its result, pickled to bytes, or
its error on the queue.
"""
from __future__ import annotations

import os
import sys
import time
import traceback

import cloudpickle
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ..comm import Collective
from . import server as _server
from .allocator import keep_freed_memory
from .context import RankContext, rank_device, timeout_delta as _td
from .failure import is_echo, stacks_to, stderr_to, summary
from .lifetime import _die_with, _die_with_parent, _own_group


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


def _kernel_cluster(world_size, network):
    """The kernel link's cluster, made (or a RuntimeError saying why it cannot be)."""
    from ..comm.kernel import KernelCluster
    cluster = KernelCluster(world_size, network).up()
    if cluster.setup_s > 1.0:
        print(f"lab.launch: kernel link for {world_size} ranks set up in {cluster.setup_s:.2f} s",
              file=sys.stderr, flush=True)
    return cluster


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
