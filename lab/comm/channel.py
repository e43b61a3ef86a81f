"""The ledgered channel under :class:`~lab.comm.Collective`: its group, ledger and link.

Every call goes through ``torch.distributed`` and appends a :class:`CommRecord` to the ledger
with the bytes of the tensors this rank handed over (padding included; a broadcast counts at
its source only), the bytes that arrived in its output buffers from other ranks
(``recv_bytes``: an allgather's grows with the world size), the measured time, and the modeled
time on the emulated network. With a :class:`Network`, a call that finished early
sleeps until its modeled time has passed; with a :class:`LinkClock` in ``clock`` (a
communication thread's copy) it books the link instead and returns at once.

Without an initialised process group the collective acts as a world of one (useful in tests
and notebooks); every op then returns its input and records zero bytes.

:class:`Channel` holds what every op shares (``_run``: time a call, wait out the link's model,
record it); the ops are in :mod:`lab.comm.collective` (reductions, broadcast),
:mod:`lab.comm.gathers` and :mod:`lab.comm.p2p`.
"""
from __future__ import annotations

import threading
import time

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


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


class Channel:
    """The state and bookkeeping of :class:`~lab.comm.Collective` (see there for the
    arguments): the group, the ledger, the emulated link, and ``_run``, through which every op
    makes its call and records it."""

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
