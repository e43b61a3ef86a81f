"""Codec throughput: GB/s of gradient through compress + decompress, vs a plain memory copy."""
from __future__ import annotations

import time

import torch

from .. import compress


def _best(fn, repeats: int) -> float:
    fn()  # warm-up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def run(names=None, sizes=(2 ** 16, 2 ** 20, 2 ** 22), repeats: int = 3, threads: int = 1) -> list[dict]:
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return _run(names or [n for n in compress.names() if n != "ef"], sizes, repeats)
    finally:
        torch.set_num_threads(before)


def _run(names, sizes, repeats) -> list[dict]:
    rows = []
    for n in sizes:
        g = torch.randn(n, generator=torch.Generator().manual_seed(0))
        copy = _best(lambda: g.clone(), repeats)
        for name in names:
            c = compress.make(name)

            def roundtrip():
                payload, ctx = c.compress(g, key="bench")
                c.decompress(payload, ctx)
            t = _best(roundtrip, repeats)
            payload, _ = c.compress(g, key="bench")
            rows.append({"codec": name, "elements": n, "GB/s": n * 4 / t / 1e9,
                         "x memcpy time": t / copy,
                         "ratio": n * 4 / max(1, compress.wire_bytes(payload))})
    return rows
