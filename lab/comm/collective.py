"""``Collective``: the only code in ``lab`` that talks to the network.

Every call goes through ``torch.distributed`` and appends a :class:`CommRecord` to the ledger
with the bytes of the tensors this rank handed over (padding included; a broadcast counts at
its source only), the bytes that arrived in its output buffers from other ranks
(``recv_bytes``: an allgather's grows with the world size), the measured time, and the modeled
time on the emulated network. With a :class:`Network`, a call that finished early
sleeps until its modeled time has passed; with a :class:`LinkClock` in ``clock`` (a
communication thread's copy) it books the link instead and returns at once.

Without an initialised process group the collective acts as a world of one (useful in tests
and notebooks); every op then returns its input and records zero bytes.
"""
from __future__ import annotations

import threading
import time
from typing import Sequence

import torch
import torch.distributed as dist

from .cost import wire_bytes
from .ledger import CommLedger
from .network import LinkClock, Network

LINKS = ("model", "kernel")
#: what a Collective made without ``link=`` uses: a rank on a kernel link sets it once, at its
#: start (``use_link``), so every Collective its code makes is on that link
_DEFAULT = {"link": "model", "reshape": None}


def use_link(link: str, reshape=None) -> None:
    """Make ``link`` (and its ``reshape``) the default of every Collective made afterwards in
    this process (a launched rank on a kernel link calls this before running its function)."""
    if link not in LINKS:
        raise ValueError(f"link must be one of {LINKS}, got {link!r}")
    _DEFAULT.update(link=link, reshape=reshape)

_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN,
        "product": dist.ReduceOp.PRODUCT}


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


class Collective:
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

    def __init__(self, group=None, ledger: CommLedger | None = None,
                 network: Network | str | None = None, link: str | None = None, reshape=None):
        if link is None:  # the process's default (a rank on a kernel link: "kernel")
            link, reshape = _DEFAULT["link"], reshape or _DEFAULT["reshape"]
        if link not in LINKS:
            raise ValueError(f"Collective: link must be one of {LINKS}, got {link!r}")
        self.group = group
        self.ledger = ledger if ledger is not None else CommLedger()
        self.link, self.reshape = link, reshape
        self._network = None
        self.network = Network.parse(network)  # on a kernel link: shaped to it
        self.distributed = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank(group) if self.distributed else 0
        self.world_size = dist.get_world_size(group) if self.distributed else 1
        self.backend = dist.get_backend(group) if self.distributed else "none"
        self._link_free = 0.0  # when the emulated link has sent the bytes of every async call
        self._link_lock = threading.Lock()
        self.clock: LinkClock | None = None  # set: calls book the link and do not sleep

    @property
    def network(self) -> Network | None:
        """The link every call is slowed to (``None``: no emulation, calls run at the speed of
        the process group). Settable during a run, to a :class:`Network` or a preset's name."""
        return self._network

    @network.setter
    def network(self, value) -> None:
        new = Network.parse(value)
        if self.link == "kernel" and self.reshape is not None and new is not None:
            self.reshape(new)  # a no-op unless the NIC's rate changes
        self._network = new

    def _model_time(self, op: str, nbytes: int) -> float:
        """What this rank waits for on the link beyond the call itself: the whole alpha-beta
        time on a modeled link, its latency term alone on a kernel link."""
        return self.network.time(op, 0 if self.link == "kernel" else nbytes, self.world_size)
    # -- bookkeeping ----------------------------------------------------------------------
    def _run(self, op: str, tag: str, nbytes: int, fn, model_bytes: int | None = None,
             sync: torch.Tensor | None = None, recv: int | None = None,
             wire: tuple[int, int] | None = None, root: int = 0):
        start = time.perf_counter()
        out = fn() if self.world_size > 1 else None
        if sync is not None and sync.is_cuda:
            torch.cuda.synchronize(sync.device)
        modeled = 0.0
        nb = nbytes if model_bytes is None else model_bytes
        if self.network is not None and self.world_size > 1:
            if self.clock is not None:  # the caller waits on the clock's spans, not here
                modeled = self.clock.book(lambda n: self._model_time(op, n), nb, time.perf_counter())
                if self.link == "kernel":
                    modeled = self.network.time(op, nb, self.world_size)
            else:
                modeled = self.network.time(op, nb, self.world_size)
                # a modeled link waits out the model's time; a kernel link took its bytes' time
                # for real and waits the latency the kernel cannot add, after the call
                left = self._model_time(op, nb) - (0.0 if self.link == "kernel"
                                                   else time.perf_counter() - start)
                if left > 0:
                    time.sleep(left)
        solo = self.world_size == 1
        seconds = 0.0 if solo else time.perf_counter() - start
        if solo:
            wire = (0, 0)
        elif wire is None:
            wire = wire_bytes(op, nb, self.world_size, self.rank, root, self.backend)
        self.ledger.add(op, tag, 0 if solo else nbytes, seconds, modeled,
                        0 if solo else (nbytes if recv is None else recv), wire)
        return out

    def _link_end(self, op: str, nbytes: int, start: float) -> tuple[float, float]:
        """(modeled seconds, end time) of an async call started at ``start``: alone on the link
        it ends ``modeled`` later, as a blocking call would; with calls still in flight its
        latency overlaps theirs but its bytes wait for theirs (one link, pipelined messages)."""
        modeled = self.network.time(op, nbytes, self.world_size)
        on_wire = min(modeled, max(0.0, modeled - self.network.time(op, 0, self.world_size)))
        with self._link_lock:
            end = max(start + modeled, self._link_free + on_wire)
            self._link_free = end
        return modeled, end

    def _wire(self, t: torch.Tensor) -> torch.Tensor:
        """gloo cannot reduce every op on CUDA tensors: stage through host memory."""
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"expected a torch.Tensor, got {type(t).__name__}")
        if self.backend == "gloo" and t.is_cuda:
            return t.cpu()
        return t.contiguous()

    # -- collectives ----------------------------------------------------------------------
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

    def allgather(self, t: torch.Tensor, tag: str = "", same_size: bool = False) -> list[torch.Tensor]:
        """Gather ``t`` from every rank. Sizes along dim 0 may differ (ragged) unless
        ``same_size``; ragged gathers first exchange sizes, then pad to the largest."""
        w = self._wire(t)
        if self.world_size == 1:
            self._run("allgather", tag, 0, lambda: None)
            return [t.clone()]
        if same_size:
            outs = [torch.empty_like(w) for _ in range(self.world_size)]
            self._run("allgather", tag, _nbytes(w),
                      lambda: dist.all_gather(outs, w, group=self.group), sync=w,
                      recv=(self.world_size - 1) * _nbytes(w))
            return [o.to(t.device) for o in outs]
        sizes = self._gather_sizes([w.shape[0] if w.dim() else 1], tag)
        w = w.reshape(-1, *w.shape[1:]) if w.dim() else w.reshape(1)
        longest = int(sizes.max())
        pad = torch.zeros((longest - w.shape[0], *w.shape[1:]), dtype=w.dtype, device=w.device)
        padded = torch.cat([w, pad]) if pad.shape[0] else w
        outs = [torch.empty_like(padded) for _ in range(self.world_size)]
        self._run("allgather", tag, _nbytes(padded),
                  lambda: dist.all_gather(outs, padded, group=self.group), sync=padded,
                  recv=(self.world_size - 1) * _nbytes(padded))
        return [o[: int(n)].to(t.device) for o, n in zip(outs, sizes[:, 0])]

    def allgather_payload(self, payload: Sequence[torch.Tensor], tag: str = "",
                          same_size: bool = False) -> list[tuple]:
        """Allgather a codec payload (a tuple of tensors of any dtypes and sizes) in one data
        call: the parts are laid end to end as bytes. A small size exchange comes first,
        unless ``same_size`` says every rank's parts have this rank's sizes."""
        parts = [self._wire(p).reshape(-1) for p in payload]
        lengths = [_nbytes(p) for p in parts]
        if self.world_size == 1:
            self._run("allgather", tag, 0, lambda: None)
            return [tuple(p.clone() for p in payload)]
        if same_size:
            sizes = torch.tensor([lengths] * self.world_size, dtype=torch.int64)
        else:
            sizes = self._gather_sizes(lengths, tag)  # (world, parts) in bytes
        buf = torch.cat([p.view(torch.uint8) for p in parts]) if parts else torch.zeros(0, dtype=torch.uint8)
        longest = int(sizes.sum(dim=1).max())
        padded = torch.cat([buf, buf.new_zeros(longest - buf.numel())])
        outs = [torch.empty_like(padded) for _ in range(self.world_size)]
        self._run("allgather", tag, _nbytes(padded),
                  lambda: dist.all_gather(outs, padded, group=self.group), sync=padded,
                  recv=(self.world_size - 1) * _nbytes(padded))
        result = []
        for out, row in zip(outs, sizes.tolist()):
            pieces, at = [], 0
            for p, n in zip(parts, row):
                pieces.append(out[at: at + n].clone().view(p.dtype).to(payload[0].device))
                at += n
            result.append(tuple(pieces))
        return result

    def allreduce_payload(self, payload: Sequence[torch.Tensor], tag: str = "") -> tuple:
        """Sum an allreduce-compatible payload across ranks, part by part (in place)."""
        return tuple(self.allreduce(p, "sum", tag) for p in payload)

    def reduce_scatter(self, t: torch.Tensor, tag: str = "") -> torch.Tensor:
        """Sum ``t`` across ranks and return this rank's chunk (``torch.tensor_split`` into
        ``world_size`` nearly equal chunks along dim 0)."""
        chunks = list(torch.tensor_split(self._wire(t), self.world_size))
        if self.world_size == 1:
            self._run("reduce_scatter", tag, 0, lambda: None)
            return chunks[0].clone()
        longest = max(c.shape[0] for c in chunks)
        padded = [torch.cat([c, c.new_zeros((longest - c.shape[0], *c.shape[1:]))]) for c in chunks]
        out = torch.empty_like(padded[0])
        total = sum(_nbytes(p) for p in padded)
        if self.backend == "gloo":
            # gloo has no reduce_scatter: allreduce the padded stack, keep our chunk. The
            # ledger still records reduce-scatter bytes and the modeled time of one.
            stack = torch.stack(padded)
            self._run("reduce_scatter", tag, total,
                      lambda: dist.all_reduce(stack, group=self.group), sync=stack,
                      recv=_nbytes(padded[self.rank]))
            out = stack[self.rank]
        else:
            self._run("reduce_scatter", tag, total,
                      lambda: dist.reduce_scatter(out, padded, group=self.group), sync=out,
                      recv=_nbytes(padded[self.rank]))
        return out[: chunks[self.rank].shape[0]].to(t.device)

    def alltoall(self, chunks: Sequence[torch.Tensor], tag: str = "") -> list[torch.Tensor]:
        """Send ``chunks[j]`` (1-D, any lengths, one dtype) to rank ``j``; return the chunks
        received, by source rank. Lengths are exchanged first, so they may differ."""
        if len(chunks) != self.world_size:
            raise ValueError(f"chunks must have one tensor per rank ({self.world_size}), got {len(chunks)}")
        send = [self._wire(c).reshape(-1) for c in chunks]
        if self.world_size == 1:
            self._run("alltoall", tag, 0, lambda: None)
            return [send[0].clone()]
        lens = torch.tensor([c.numel() for c in send], dtype=torch.int64)
        got = torch.empty_like(lens)
        if self.backend == "nccl":
            lens, got = lens.cuda(), got.cuda()
        self._run("alltoall", f"{tag}:sizes", _nbytes(lens),
                  lambda: dist.all_to_all_single(got, lens, group=self.group),
                  recv=(self.world_size - 1) * 8,
                  wire=((self.world_size - 1) * 8, (self.world_size - 1) * 8))
        in_sizes, out_sizes = lens.tolist(), got.tolist()
        flat_in = torch.cat(send)
        flat_out = flat_in.new_empty(sum(out_sizes))
        from_others = sum(n for j, n in enumerate(out_sizes) if j != self.rank)
        to_others = sum(n for j, n in enumerate(in_sizes) if j != self.rank)
        size = flat_in.element_size()
        self._run("alltoall", tag, _nbytes(flat_in),
                  lambda: dist.all_to_all_single(flat_out, flat_in, out_sizes, in_sizes,
                                                 group=self.group), sync=flat_in,
                  recv=from_others * size, wire=(to_others * size, from_others * size))
        # clones, not views into one buffer: a chunk may be re-viewed as another dtype
        return [o.clone().to(chunks[0].device) for o in flat_out.split(out_sizes)]

    # -- point to point -------------------------------------------------------------------
    def send(self, t: torch.Tensor, dst: int, tag: str = "") -> None:
        """Send ``t`` to rank ``dst`` (blocking, matched by its :meth:`recv`); records its bytes."""
        self._check_rank(dst, "dst")
        w = self._wire(t)
        self._run("send", tag, _nbytes(w), lambda: dist.send(w, dst, group=self.group), recv=0,
                  wire=(_nbytes(w), 0))

    def recv(self, t: torch.Tensor, src: int, tag: str = "") -> torch.Tensor:
        """Receive into ``t``; records zero bytes sent (the sender's ledger counts them)."""
        self._check_rank(src, "src")
        w = self._wire(t)
        self._run("recv", tag, 0, lambda: dist.recv(w, src, group=self.group),
                  model_bytes=_nbytes(w), recv=_nbytes(w), wire=(0, _nbytes(w)))
        if w is not t:
            t.copy_(w)
        return t

    def recv_any(self, t: torch.Tensor, tag: str = "") -> int:
        """Receive into ``t`` from whichever rank sends first; returns that rank (a parameter
        server serving workers in arrival order). Ledger as :meth:`recv`."""
        w = self._wire(t)
        src = self._run("recv", tag, 0, lambda: dist.recv(w, None, group=self.group),
                        model_bytes=_nbytes(w), recv=_nbytes(w), wire=(0, _nbytes(w)))
        if w is not t:
            t.copy_(w)
        return int(src) if src is not None else self.rank

    def sendrecv(self, send_t: torch.Tensor, dst: int, recv_t: torch.Tensor, src: int,
                 tag: str = "") -> torch.Tensor:
        """Send ``send_t`` to ``dst`` while receiving ``recv_t`` from ``src`` (no deadlock in
        a ring, where everyone sends and receives at once)."""
        self._check_rank(dst, "dst")
        self._check_rank(src, "src")
        s, r = self._wire(send_t), self._wire(recv_t)

        def go():
            reqs = [dist.isend(s, dst, group=self.group), dist.irecv(r, src, group=self.group)]
            for q in reqs:
                q.wait()
        self._run("send", tag, _nbytes(s), go, recv=_nbytes(r), wire=(_nbytes(s), _nbytes(r)))
        if r is not recv_t:
            recv_t.copy_(r)
        return recv_t

    def barrier(self, tag: str = "") -> None:
        """Wait until every rank has reached this call; records zero bytes."""
        self._run("barrier", tag, 0, lambda: dist.barrier(group=self.group), recv=0, wire=(0, 0))

    # -- helpers --------------------------------------------------------------------------
    def _gather_sizes(self, lengths: list[int], tag: str) -> torch.Tensor:
        mine = torch.tensor(lengths, dtype=torch.int64)
        if self.backend == "nccl":
            mine = mine.cuda()
        outs = [torch.empty_like(mine) for _ in range(self.world_size)]
        self._run("allgather", f"{tag}:sizes", _nbytes(mine),
                  lambda: dist.all_gather(outs, mine, group=self.group),
                  recv=(self.world_size - 1) * _nbytes(mine))
        return torch.stack(outs).cpu()

    def _check_rank(self, r: int, arg: str) -> None:
        if not isinstance(r, int) or not 0 <= r < self.world_size:
            raise ValueError(f"{arg} must be a rank in [0, {self.world_size}), got {r!r}")
