"""What a worker function receives as its first argument: who it is and how to talk."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from ..comm import Collective, Network
from .allocator import keep_freed_memory


@dataclass
class RankContext:
    """What a launched function receives as ``ctx``: its ``rank``, the ``world_size``, its
    ``device``, the ``backend`` and a ready :class:`~lab.comm.Collective` (``comm``); plus
    :meth:`~lab.runtime.RankContext.log` and :meth:`~lab.runtime.RankContext.progress`, which
    report to the caller."""

    rank: int
    world_size: int
    device: torch.device
    backend: str
    comm: Collective
    _queue: Any = field(default=None, repr=False)

    @property
    def is_main(self) -> bool:
        """True on rank 0, the rank that by convention prints and saves for all of them."""
        return self.rank == 0

    def progress(self, done: int, total: int, desc: str = "") -> None:
        """Report progress; rank 0's reports drive the caller's progress bar."""
        if self._queue is not None and self.rank == 0:
            self._queue.put(("progress", self.rank, done, total, desc))

    def stream(self, item: Any) -> None:
        """Send ``item`` (picklable) to the caller now; if the launch fails it is in the
        :class:`~lab.runtime.LaunchError`'s ``records``, so a run keeps what it had."""
        if self._queue is not None:
            self._queue.put(("record", self.rank, item))

    def log(self, *parts: Any) -> None:
        """Print in the caller's output (a notebook cell), prefixed with the rank."""
        text = " ".join(str(p) for p in parts)
        if self._queue is not None:
            self._queue.put(("log", self.rank, text))
        else:
            print(f"[rank {self.rank}] {text}", flush=True)


#: The longest timeout handed to torch.distributed (24 days: under 2**31 ms): what an infinite
#: timeout becomes there.
LONGEST_TIMEOUT = timedelta(days=24)


def timeout_delta(seconds: float) -> timedelta:
    """``seconds`` as the timedelta torch.distributed takes (``float("inf")``, no timeout:
    :data:`LONGEST_TIMEOUT`)."""
    if seconds >= LONGEST_TIMEOUT.total_seconds():
        return LONGEST_TIMEOUT
    return timedelta(seconds=seconds)


DEVICES = ("auto", "cpu", "cuda")  # what a launch (and a notebook profile) may ask to compute on


def pick_backend(world_size: int, backend: str = "auto", device: str = "auto") -> tuple[str, str]:
    """Choose (backend, device kind): NCCL when every rank has its own GPU, else gloo (with
    compute on a GPU if there is one and ``device`` allows it)."""
    if backend not in ("auto", "gloo", "nccl"):
        raise ValueError(f"backend must be 'auto', 'gloo' or 'nccl', got {backend!r}")
    if device not in DEVICES:
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', got {device!r}")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if device == "cuda" and gpus == 0:
        raise ValueError("device='cuda' but no CUDA device is visible")
    if backend == "nccl" and gpus < world_size:
        raise ValueError(f"backend='nccl' needs one GPU per rank: world_size={world_size}, GPUs={gpus}")
    kind = "cuda" if (device == "cuda" or (device == "auto" and gpus > 0)) else "cpu"
    if backend == "auto":
        backend = "nccl" if kind == "cuda" and gpus >= world_size else "gloo"
    return backend, kind


def rank_device(rank: int, kind: str) -> torch.device:
    """The device of rank ``rank`` for device kind ``kind``: GPU ``rank`` modulo the GPU count
    (made current) for ``"cuda"``, else the CPU."""
    if kind == "cuda":
        d = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(d)
        return d
    return torch.device("cpu")


def from_env(backend: str = "auto", device: str = "auto", network=None,
             timeout: float = 300) -> RankContext:
    """Join the process group described by torchrun's environment (RANK, WORLD_SIZE,
    MASTER_ADDR, MASTER_PORT, LOCAL_RANK) and return this rank's context."""
    missing = [v for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if v not in os.environ]
    if missing:
        raise RuntimeError(f"not under torchrun: environment lacks {', '.join(missing)}")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    backend, kind = pick_backend(1, backend, device)  # per node: one GPU per local rank
    keep_freed_memory()
    if not dist.is_initialized():
        dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world,
                                timeout=timeout_delta(timeout))
    dev = rank_device(local, kind)
    return RankContext(rank, world, dev, backend, Collective(network=Network.parse(network)))
