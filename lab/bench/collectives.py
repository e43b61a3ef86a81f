"""Collective wrapper overhead vs raw ``torch.distributed`` calls, and the fitted alpha/beta."""
from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from ..comm import AlphaBeta, Collective
from ..comm.measure import sweep
from ..runtime import launch
from .made import stamp


def _overhead(ctx, sizes, iters):
    comm = Collective()
    rows = []
    for n in sizes:
        t = torch.ones(n // 4)
        calls = {"raw": lambda: dist.all_reduce(t), "lab": lambda: comm.allreduce(t)}
        for call in calls.values():
            for _ in range(3):
                call()
        dist.barrier()
        samples = {"raw": [], "lab": []}
        for _ in range(iters):  # alternate call by call, so both see the same machine load
            for label, call in calls.items():
                t0 = time.perf_counter()
                call()
                samples[label].append(time.perf_counter() - t0)
        res = {k: statistics.median(v) for k, v in samples.items()}
        rows.append({"bytes": n, "raw us": res["raw"] * 1e6, "lab us": res["lab"] * 1e6,
                     "overhead %": 100 * (res["lab"] / res["raw"] - 1)})
    return stamp(rows, "none", clock={"raw us": "wall", "lab us": "wall"}, bytes={"bytes": "handed over"})


def bookkeeping_us(calls: int = 20000) -> float:
    """The wrapper's own cost per call (timing, ledger record), around a no-op collective."""
    comm = Collective()
    comm.world_size = 2  # book it as a real call, but run nothing
    for timed in (False, True):  # the first pass pays the interpreter's early GC sweeps
        comm.ledger.clear()
        t0 = time.perf_counter()
        for _ in range(calls):
            comm._run("allreduce", "bench", 4096, lambda: None)
    return (time.perf_counter() - t0) / calls * 1e6


def overhead(world: int = 2, sizes=(4096, 262_144, 4_194_304), iters: int = 200) -> list[dict]:
    return launch(_overhead, world, sizes, iters, timeout=300)[0]


def _sweep(ctx, sizes, repeats):
    return sweep(Collective(), sizes, repeats=repeats)


def fit(worlds=(2, 4), sizes=(2 ** 10, 2 ** 14, 2 ** 17, 2 ** 20, 2 ** 22), repeats: int = 5):
    samples = []
    for p in worlds:
        samples += launch(_sweep, p, sizes, repeats, timeout=300)[0]
    ab = AlphaBeta.fit(samples)
    rows = [{"op": op, "p": p, "bytes": n, "measured ms": t * 1e3,
             "model ms": ab.time(op, n, p) * 1e3} for op, n, p, t in samples]
    rows = stamp(rows, "none", clock={"measured ms": "wall", "model ms": "modeled"},
                 bytes={"bytes": "handed over"})
    return ab, rows
