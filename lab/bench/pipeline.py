"""``python -m lab bench pipeline [--quick] [--json]``: the schedules of Part 9, measured.

1. ``schedules``: per schedule (gpipe, 1f1b, async, async-stash, async-nesterov), tokens per
   second and the measured bubble (idle share of the wall clock) of the tiny GPT on 4 stages
   (4 processes), at two emulated bandwidths between stages. Each stage's compute is stretched
   10x by sleeping (``slow_ranks``), so four ranks overlap like four devices even on 2 cores.
2. ``axes``: bytes per step along each axis of a 2 x 2 mesh (from the ledgers), for no data
   parallelism, synchronous gradient allreduce and sparse averaging of 5% and 1%.
"""
from __future__ import annotations

import json

from ..pipeline import PipelineConfig, train_many
from ..pipeline.config import SCHEDULES
from ..pipeline.gpipe import bubble_fraction
from ..pipeline.report import bubble, bytes_per_step, tokens_per_s
from .made import stamp
from .table import bench_parser, print_rows

NETWORKS = ("1Gbps,0.5ms", "100Mbps,2ms")
GPT = {"layers": 2, "dim": 32}


def schedules(steps: int = 12, networks=NETWORKS, stretch: float = 10.0) -> list[dict]:
    base = dict(model="gpt", data="text", model_kw=GPT, stages=4, microbatches=4, steps=steps,
                batch_size=32, lr=2e-3, slow_ranks={r: stretch for r in range(4)})
    cfgs = [PipelineConfig(schedule=s, network=n, **base) for n in networks for s in SCHEDULES]
    rows = []
    for c, h in zip(cfgs, train_many(cfgs, progress=False, timeout=120 + 60 * len(cfgs))):
        rows.append({"network": c.network, "schedule": c.schedule, "tokens/s": round(tokens_per_s(h)),
                     "bubble": round(bubble(h), 3),
                     "gpipe formula": round(bubble_fraction(4, 4), 3) if c.schedule in ("gpipe", "1f1b") else 0.0,
                     "pipeline B/step": round(bytes_per_step(h)["pipeline"])})
    return stamp(rows, "modeled", clock={"tokens/s": "wall", "bubble": "wall"},
                 bytes={"pipeline B/step": "handed over"})


def axes(steps: int = 6) -> list[dict]:
    base = dict(model="gpt", data="text", model_kw=GPT, stages=2, replicas=2, microbatches=2,
                steps=steps, batch_size=32, lr=2e-3, schedule="async-nesterov")
    cfgs = [PipelineConfig(dp="none", **base), PipelineConfig(dp="allreduce", **base),
            PipelineConfig(dp="sparse-avg", dp_kw={"fraction": 0.05, "delay": 4}, **base),
            PipelineConfig(dp="sparse-avg", dp_kw={"fraction": 0.01, "delay": 4}, **base)]
    rows = []
    for c, h in zip(cfgs, train_many(cfgs, progress=False, timeout=300)):
        b = bytes_per_step(h)
        rows.append({"data axis": c.dp + (f" {c.dp_kw['fraction']:.0%}" if c.dp_kw else ""),
                     "pipeline B/step (all ranks)": round(b["pipeline"]),
                     "data B/step (all ranks)": round(b["data"])})
    return stamp(rows, "none", bytes={"pipeline B/step (all ranks)": "handed over",
                                      "data B/step (all ranks)": "handed over"})


def main(argv=None) -> int:
    p = bench_parser("pipeline", __doc__)
    p.add_argument("--quick", action="store_true", help="fewer steps")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    a = p.parse_args(argv)
    out = {"schedules": schedules(steps=6 if a.quick else 12), "axes": axes(steps=3 if a.quick else 6)}
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        print_rows(out["schedules"], "pipeline schedules, tiny GPT on 4 stages, m = 4")
        print_rows(out["axes"], "bytes per step per axis, 2 x 2 mesh (async-nesterov)")
    return 0
