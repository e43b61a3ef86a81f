"""AR-Topk against the allgather baselines and dense allreduce: step time and bytes, p = 2, 4.

``python -m lab bench artopk [--size N] [--density D] [--workers 2 4] [--networks none 1Gbps,1ms]
[--repeats R] [--quick] [--json]``. Each row: one exchange of an fp32 gradient of ``size``
entries through an aggregator, on loopback or an emulated link, in real processes: the median
wall time on rank 0 (``ms``; ``x memcpy`` is that over a ``clone()`` of the gradient), the bytes
rank 0 sent and received per exchange (ledger), and the modeled time on the link. The
allgather baselines are Top-k, MSTopK (threshold search) and layer-wise Top-k (the gradient
cut into four tensors, one allgather each). The
``controller`` rows time ``adaptive_topk``'s density choice (``probe``: gain measurement, its
allreduce and, on the first step, a decision; ``re-decision``: the curve fits, NSGA-II and ASF
pick alone, or the lab's grid search), for the authors' method and the grid.
"""
from __future__ import annotations

import json
import statistics
import sys
import time

import torch

from ..runtime import launch
from .made import link_of, stamp
from .table import bench_parser, print_rows

SCHEMES = {
    "artopk star (ring)": ("artopk", dict(variant="star", collective="ring")),
    "artopk var (tree)": ("artopk", dict(variant="var", collective="tree")),
    "artopk auto": ("artopk", dict(variant="star", collective="auto")),
    "topk allgather": ("compressed", {}),
    "mstopk allgather": ("mstopk", {}),
    "layer-wise topk allgather (4 tensors)": ("lwtopk", {}),
    "dense fp32 allreduce": ("allreduce", {}),
}


def _bench(ctx, size, density, networks, repeats):
    from .. import aggregate, compress
    from ..comm import Collective, Network
    x = torch.randn(size, generator=torch.Generator().manual_seed(ctx.rank))
    copy = min(_timed(lambda: x.clone()) for _ in range(5))
    rows = []
    for spec in networks:
        for label, (name, kw) in SCHEMES.items():
            comm = Collective(network=Network.parse(spec))
            if name == "compressed":
                kw = dict(compressor=compress.ErrorFeedback(compress.make("topk", density=density)))
            elif name in ("artopk", "mstopk", "lwtopk"):
                kw = dict(kw, density=density)
            agg = aggregate.make(name, comm, **kw)
            grads = list(x.chunk(4)) if name == "lwtopk" else [x]  # layer-wise: four tensors
            secs, sent, recv, modeled = [], 0, 0, 0.0
            for step in range(repeats + 1):
                before = len(comm.ledger.records)
                t = _timed(lambda: agg.aggregate(grads, step))
                recs = comm.ledger.records[before:]
                if step:  # the first call warms up
                    secs.append(t)
                    sent, recv = sum(r.bytes for r in recs), sum(r.recv_bytes for r in recs)
                    modeled = sum(r.modeled for r in recs)
            med = statistics.median(secs)
            rows.append({"p": ctx.world_size, "network": spec, "scheme": label,
                         "ms": 1e3 * med, "x memcpy": med / copy, "sent B": sent,
                         "recv B": recv, "modeled ms": 1e3 * modeled,
                         "chosen": agg.info().get("collective", "-")})
    for method in ("nsga2", "grid"):
        agg = aggregate.make("adaptive_topk", Collective(), probe_every=1, warmup_steps=0,
                             method=method)  # probe every step
        times = [_timed(lambda s=s: agg.density_for(x, s)) for s in range(repeats + 1)][1:]
        ctl = agg.controller  # one re-decision alone (fits + NSGA-II + ASF, or the grid)
        decide = [_timed(lambda: ctl.decide(size, ctx.world_size, 1e-3, 1 / 1.25e8))
                  for _ in range(repeats)]
        rows.append({"p": ctx.world_size, "network": "none",
                     "scheme": f"controller {method} (probe)", "ms": 1e3 * statistics.median(times),
                     "x memcpy": statistics.median(times) / copy,
                     "sent B": 4 * len(ctl.candidates), "recv B": 4 * len(ctl.candidates),
                     "modeled ms": 0.0, "chosen": f"{ctl.density:.4f}"})
        rows.append({"p": ctx.world_size, "network": "none",
                     "scheme": f"controller {method} (re-decision)",
                     "ms": 1e3 * statistics.median(decide), "x memcpy": statistics.median(decide) / copy,
                     "sent B": 0, "recv B": 0, "modeled ms": 0.0, "chosen": f"{ctl.density:.4f}"})
    return stamp(rows, lambda r: link_of(r["network"]), clock={"ms": "wall", "modeled ms": "modeled"},
                 bytes={"sent B": "handed over", "recv B": "handed over"})


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run(size=1_000_000, density=0.01, workers=(2, 4), networks=("none", "1Gbps,1ms"),
        repeats=5) -> list[dict]:
    if not 0 < density <= 1:
        raise ValueError(f"density must be in (0, 1], got {density}")
    rows = []
    for p in workers:
        rows += launch(_bench, p, size, density, list(networks), repeats, progress=False)[0]
    return rows


def main(argv=None) -> list[dict]:
    ap = bench_parser("artopk", __doc__)
    ap.add_argument("--size", type=int, default=None, help="gradient entries (default 1M; quick 200k)")
    ap.add_argument("--density", type=float, default=0.01, help="fraction of entries kept (default 0.01)")
    ap.add_argument("--workers", type=int, nargs="+", default=[2, 4], help="world sizes (default: 2 4)")
    ap.add_argument("--networks", nargs="+", default=["none", "1Gbps,1ms"],
                    help="'none' (loopback) or links such as 1Gbps,1ms")
    ap.add_argument("--repeats", type=int, default=None,
                    help="timed calls per row after a warm-up, their median reported (default 7; quick 3)")
    ap.add_argument("--quick", action="store_true", help="a smaller gradient, fewer repeats")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    a = ap.parse_args([] if argv is None else argv)
    size = a.size or (200_000 if a.quick else 1_000_000)
    rows = run(size, a.density, a.workers, a.networks, a.repeats or (3 if a.quick else 7))
    if a.json:
        print(json.dumps(rows, indent=1))
    else:
        print_rows(rows, f"AR-Topk vs the allgather baselines vs dense allreduce: {size:,} fp32 "
                         f"entries, "
                         f"density {a.density}")
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
