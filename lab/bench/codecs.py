"""Codec throughput: GB/s of gradient through compress + decompress, vs a plain memory copy.

``python -m lab bench codecs [--device cpu|cuda] [--sizes N ...] [--codecs NAME ...] [--quick]
[--json]``. Each row: the best of ``repeats`` round trips (compress, then decompress) of an fp32
tensor of ``elements`` values on ``device``; ``GB/s`` is input bytes per second; ``x memcpy time`` is
that time over the time of ``tensor.clone()`` on the same device (1.0 = as fast as a copy).
On the CPU the default is one thread (the issue's measure); on a GPU every call is
synchronised before the clock stops. ``ratio`` is the compression ratio (dense bytes / wire
bytes), from the payload itself. :func:`run` tunes glibc's allocator as the training ranks do
(:mod:`lab.runtime.allocator`; ``LAB_KEEP_FREED_MEMORY=0`` measures with its defaults).
On the CPU, the cast, sign, 1-bit, QSGD and TernGrad codecs run their C kernels
(:mod:`lab.compress.native`); ``LAB_NATIVE=0`` measures the torch reference instead.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from .. import compress
from ..runtime.allocator import keep_freed_memory
from .table import print_rows

DEFAULT = ("none", "fp16", "bf16", "sign", "scaled_sign", "efsgd", "onebit", "qsgd",
           "terngrad", "zipml", "randomk", "randomk_shared", "topk", "topk_sampled", "wangni",
           "dgc", "adacomp", "threshold", "gradient_dropping", "qsgd_elias")


def _best(fn, repeats: int, sync) -> float:
    fn()  # warm-up (allocator, lazy init, first touch)
    sync()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t0)
    return best


def run(names=None, sizes=(2 ** 16, 2 ** 20, 2 ** 22), repeats: int = 3, threads: int = 1,
        device: str = "cpu") -> list[dict]:
    dev = torch.device(device)
    keep_freed_memory()  # measured as the training ranks run them
    before = torch.get_num_threads()
    if dev.type == "cpu" and threads:
        torch.set_num_threads(threads)
    try:
        known = compress.names()
        names = names or [n for n in DEFAULT if n in known]
        for n in names:
            if n not in known:
                raise ValueError(f"codecs: unknown codec {n!r}; known: {', '.join(known)}")
        return _run(names, sizes, repeats, dev)
    finally:
        torch.set_num_threads(before)


def _run(names, sizes, repeats, dev) -> list[dict]:
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
    rows = []
    for n in sizes:
        g = torch.randn(n, generator=torch.Generator().manual_seed(0)).to(dev)
        copy = _best(lambda: g.clone(), repeats, sync)
        for name in names:
            c = compress.make(name)

            def roundtrip():
                payload, ctx = c.compress(g, key="bench")
                c.decompress(payload, ctx)
            t = _best(roundtrip, repeats, sync)
            payload, _ = c.compress(g, key="bench")
            rows.append({"codec": name, "device": dev.type, "elements": n,
                         "GB/s": n * 4 / t / 1e9, "ms": 1e3 * t, "x memcpy time": t / copy,
                         "ratio": n * 4 / max(1, compress.wire_bytes(payload))})
    return rows


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(prog="python -m lab bench codecs", description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    ap.add_argument("--sizes", type=int, nargs="+", default=None,
                    help="elements per tensor (default 2^20 2^22 on cpu, 2^24 on cuda)")
    ap.add_argument("--codecs", nargs="+", default=None, help="codec names (default: the main ones)")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--threads", type=int, default=1, help="CPU threads (default 1; 0: leave as is)")
    ap.add_argument("--quick", action="store_true", help="one size, fewer repeats")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    a = ap.parse_args([] if argv is None else argv)
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("codecs: --device cuda asked for, but no CUDA device is visible")
    sizes = a.sizes or ([2 ** 24] if a.device.startswith("cuda") else
                        [2 ** 20] if a.quick else [2 ** 20, 2 ** 22])
    repeats = a.repeats or (3 if a.quick else 5)
    rows = run(a.codecs, sizes, repeats, a.threads, a.device)
    if a.json:
        print(json.dumps(rows, indent=1))
    else:
        kernels = ""
        if a.device == "cpu":  # which CPU path ran: the C kernels or the torch reference
            kernels = ", C kernels" if compress.native.enabled(torch.zeros(1)) else \
                ", torch reference (LAB_NATIVE=0 or no C compiler)"
        print_rows(rows, f"codec throughput on {a.device} (compress + decompress"
                         f"{', 1 thread' if a.device == 'cpu' and a.threads == 1 else ''}"
                         f"{kernels})")
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
