"""Measure collectives on this machine: the sweep the alpha-beta model is fitted from."""
from __future__ import annotations

import statistics
import time

import torch

from .collective import Collective

OPS = ("allreduce", "allgather", "broadcast")


def _call(comm: Collective, op: str, t: torch.Tensor) -> None:
    if op == "allreduce":
        comm.allreduce(t, tag="sweep")
    elif op == "allgather":
        comm.allgather(t, tag="sweep", same_size=True)
    elif op == "broadcast":
        comm.broadcast(t, 0, tag="sweep")
    else:
        raise ValueError(f"op must be one of {OPS}, got {op!r}")


def sweep(comm: Collective, sizes=(2 ** 10, 2 ** 14, 2 ** 18, 2 ** 21), ops=OPS,
          repeats: int = 5, warmup: int = 2) -> list[tuple[str, int, int, float]]:
    """Median seconds of each ``op`` at each size in bytes, as ``(op, nbytes, p, seconds)``.

    Every rank times the same calls; a barrier before each call lines the ranks up so one
    rank's lateness is not billed to the collective.
    """
    out = []
    for op in ops:
        for n in sizes:
            t = torch.ones(max(1, n // 4))
            times = []
            for i in range(warmup + repeats):
                comm.barrier(tag="sweep")
                t0 = time.perf_counter()
                _call(comm, op, t)
                if i >= warmup:
                    times.append(time.perf_counter() - t0)
            out.append((op, t.numel() * 4, comm.world_size, statistics.median(times)))
    return out


def sweep_worker(ctx, sizes=(2 ** 10, 2 ** 14, 2 ** 18, 2 ** 21), ops=OPS, repeats: int = 5):
    """``launch(sweep_worker, p)``: the sweep on a fresh collective (no emulation)."""
    return sweep(Collective(), sizes, ops, repeats)
