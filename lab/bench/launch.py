"""Launch cost: ``lab.launch`` of N ranks vs a raw ``spawn`` + ``init_process_group``."""
from __future__ import annotations

import os
import socket
import statistics
import time

import torch.distributed as dist
import torch.multiprocessing as mp

from ..runtime import launch
from .made import stamp


def _noop(ctx):
    return ctx.rank


def _raw_rank(rank, world, port):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def raw_spawn(world: int) -> float:
    t0 = time.perf_counter()
    mp.start_processes(_raw_rank, args=(world, _free_port()), nprocs=world, start_method="spawn")
    return time.perf_counter() - t0


def timed_launch(world: int, **kw) -> float:
    t0 = time.perf_counter()
    launch(_noop, world, progress=False, **kw)
    return time.perf_counter() - t0


def run(world: int = 4, repeats: int = 3) -> list[dict]:
    timed_launch(world)  # start the forkserver once, as a notebook's first launch does
    rows = []
    for label, fn in (("raw spawn + init_process_group", lambda: raw_spawn(world)),
                      ("lab.launch (forkserver, default)", lambda: timed_launch(world)),
                      ("lab.launch (spawn)", lambda: timed_launch(world, start_method="spawn"))):
        ts = [fn() for _ in range(repeats)]
        rows.append({"method": label, "ranks": world, "median s": statistics.median(ts),
                     "min s": min(ts)})
    base = rows[0]["median s"]
    for r in rows:
        r["vs raw"] = r["median s"] / base
    rows.append({"method": f"cpu cores: {os.cpu_count()}", "ranks": "", "median s": "",
                 "min s": "", "vs raw": ""})
    return stamp(rows, "none", clock={"median s": "wall", "min s": "wall"})
