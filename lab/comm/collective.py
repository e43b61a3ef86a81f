"""``Collective``: the only code in ``lab`` that talks to the network.

Every call goes through ``torch.distributed`` and appends a :class:`CommRecord` to the ledger
(bytes handed over and received, measured and modeled time; see :mod:`lab.comm.channel`, which
also says how a call waits out the emulated link). Without an initialised process group the
collective acts as a world of one (useful in tests and notebooks); every op then returns its
input and records zero bytes.

The class is assembled from parts, one file each: :mod:`lab.comm.channel` (its state, the
bookkeeping every op shares, :func:`use_link` and :data:`LINKS`), :mod:`lab.comm.gathers`
(allgather, reduce-scatter, all-to-all), :mod:`lab.comm.p2p` (send/recv, barrier); the
reductions and the broadcast are here.
"""
from __future__ import annotations

import threading
import time
from typing import Sequence

import torch
import torch.distributed as dist

from .channel import LINKS, _DEFAULT, _nbytes, use_link  # noqa: F401  (their old home)
from .cost import wire_bytes
from .gathers import Gathers
from .p2p import PointToPoint

_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN,
        "product": dist.ReduceOp.PRODUCT}


class Collective(Gathers, PointToPoint):
    """The one object that sends: allreduce (blocking or async), allgather (ragged sizes
    allowed), broadcast, reduce-scatter, all-to-all, send/recv and barrier over
    ``torch.distributed``, each call recorded in ``ledger``.

    ``group``: the process group (``None``: the default group); ``ledger``: where records go
    (a new :class:`CommLedger` if ``None``); ``network``: an emulated link (a :class:`Network`,
    or the name of one of :data:`~lab.comm.network.PRESETS`) that every call is slowed to.
    ``link``: ``None`` (this process's default, ``use_link``), ``"model"`` (that emulation: a call lasts at least its alpha-beta time) or
    ``"kernel"`` (the ranks sit on a kernel link, :mod:`lab.comm.kernel`, that carries the bytes
    at the network's rate for real: a call adds only the model's latency term, which the kernel
    cannot delay); ``reshape`` (kernel links) is called with a new network when ``network`` is
    set to one of another bandwidth, to shape the NIC in place.
    Without an initialised process group it is a world of one: every op returns its input and
    records zero bytes. Each record also gives the bytes on this rank's wire under the op's
    algorithm (:func:`~lab.comm.cost.wire_bytes`).
    """

    def allreduce(self, t: torch.Tensor, op: str = "sum", tag: str = "") -> torch.Tensor:
        """In-place allreduce of ``t`` (``op`` in sum/max/min/product); returns ``t``."""
        if op not in _OPS:
            raise ValueError(f"op must be one of {sorted(_OPS)}, got {op!r}")
        w = self._wire(t)
        self._run("allreduce", tag, _nbytes(w),
                  lambda: dist.all_reduce(w, _OPS[op], group=self.group), sync=w)
        if w is not t:
            t.copy_(w)
        return t

    def allreduce_async(self, t: torch.Tensor, op: str = "sum", tag: str = "",
                        then=None) -> torch.futures.Future:
        """Start an in-place allreduce of ``t``; returns a future completed with ``t``, or with
        ``then(t)`` if given (run in the same callback: a DDP hook that decompresses there
        costs one Python callback per bucket, as torch's own hooks do, not two).

        The future completes when the collective is done *and* the emulated link has carried
        it (``_link_end``: calls in flight together overlap their latency, their bytes
        queue one call after another); its ledger record is added then."""
        if op not in _OPS:
            raise ValueError(f"op must be one of {sorted(_OPS)}, got {op!r}")
        w = self._wire(t)
        out: torch.futures.Future = torch.futures.Future()
        if self.world_size == 1:
            self._run("allreduce", tag, 0, lambda: None)
            out.set_result(then(t) if then else t)
            return out
        start, nbytes = time.perf_counter(), _nbytes(w)
        work = dist.all_reduce(w, _OPS[op], group=self.group, async_op=True)

        def collected(f):  # the collective has finished on this rank (or raises its error)
            f.value()
            if w.is_cuda:
                torch.cuda.synchronize(w.device)

        def complete(modeled):  # record it, hand back the result
            self.ledger.add("allreduce", tag, nbytes, time.perf_counter() - start, modeled, nbytes,
                            wire_bytes("allreduce", nbytes, self.world_size))
            if w is not t:
                t.copy_(w)
            return then(t) if then else t

        if self.network is None:  # nothing to wait for: chain on the work's own future
            def after(f):
                collected(f)
                return complete(0.0)
            return work.get_future().then(after)

        def finish(modeled):
            try:
                out.set_result(complete(modeled))
            except Exception as exc:  # noqa: BLE001  (handed to whoever waits on the future)
                out.set_exception(exc)

        modeled, end = self._link_end("allreduce", nbytes, start)

        def done(f):
            try:
                collected(f)
                # a kernel link carried the bytes: only the model's latency is left to wait
                left = (self._model_time("allreduce", nbytes) if self.link == "kernel"
                        else end - time.perf_counter())
                if left > 0:  # a timer, not a sleep: never block the thread that completed it
                    timer = threading.Timer(left, finish, (modeled,))
                    timer.daemon = True
                    timer.start()
                else:
                    finish(modeled)
            except Exception as exc:  # noqa: BLE001  (handed to whoever waits on the future)
                out.set_exception(exc)
        work.get_future().add_done_callback(done)
        return out

    def broadcast(self, t: torch.Tensor, src: int = 0, tag: str = "") -> torch.Tensor:
        """Copy rank ``src``'s ``t`` into ``t`` on every rank, in place; returns ``t``. Only
        ``src`` records the bytes as sent, the others as received."""
        self._check_rank(src, "src")
        w = self._wire(t)
        self._run("broadcast", tag, _nbytes(w) if self.rank == src else 0,
                  lambda: dist.broadcast(w, src, group=self.group), sync=w,
                  model_bytes=_nbytes(w), recv=0 if self.rank == src else _nbytes(w), root=src)
        if w is not t:
            t.copy_(w)
        return t

    def allreduce_payload(self, payload: Sequence[torch.Tensor], tag: str = "") -> tuple:
        """Sum an allreduce-compatible payload across ranks, part by part (in place)."""
        return tuple(self.allreduce(p, "sum", tag) for p in payload)
