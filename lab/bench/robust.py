"""Robust aggregation rules: time per call on n vectors of d values; bytes per step of each
averaging scheme.

The rules are timed on the stacked vectors (after the allgather: the rule's own cost), medians
over ``repeats`` after a warm-up. Krum computes all pairwise distances (O(n^2 d)): the
``x vs n=first`` column is the time ratio to the smallest n, to compare with (n / n0)^2 for Krum
and n / n0 (times a log factor for the sorts) for the coordinate-wise rules. The baseline is the
plain mean of the same vectors (``vectors.mean(0)``). Bytes per step come from the ledger of a
short real training run (MLP on digits) for each averaging scheme.
"""
from __future__ import annotations

import json
import sys

import torch

from ..aggregate import make
from ..comm import Collective
from .made import stamp
from .table import bench_parser, median_seconds, print_rows

RULES = {"mean (baseline)": None, "krum": {"f": 1}, "multikrum": {"f": 1}, "median": {},
         "trimmed_mean": {"f": 1}, "centered_clip": {"tau": 1.0}}



def time_rules(ns=(8, 16), d: int = 1_000_000, repeats: int = 3, seed: int = 0) -> list[dict]:
    solo, rows = Collective(), []
    for name, kw in RULES.items():
        first = None
        for n in ns:
            v = torch.randn(n, d, generator=torch.Generator().manual_seed(seed))
            if kw is None:
                t = median_seconds(lambda: v.mean(0), repeats)
            else:
                rule = make(name, comm=solo, **kw)
                t = median_seconds(lambda: rule.rule(v, 0), repeats)
            first = first or t
            rows.append({"rule": name, "n": n, "d": d, "ms": 1e3 * t, "x vs n=first": t / first})
    return stamp(rows, "none", clock={"ms": "wall"})


def averaging_bytes(steps: int = 32, workers: int = 4) -> list[dict]:
    from ..train import TrainConfig, train_many
    base = TrainConfig(steps=steps, batch_size=64, eval_every=0)
    cfgs = {"sync fp32": base, "sync fp16": base.with_(compressor="fp16"),
            "local H=8": base.with_(averaging="local", averaging_kw={"period": 8}),
            "post-local H=8 (warmup 8)": base.with_(averaging="local",
                                                    averaging_kw={"period": 8, "warmup": 8}),
            "easgd tau=4": base.with_(averaging="easgd", averaging_kw={"period": 4}),
            "oneshot": base.with_(averaging="oneshot")}
    hs = train_many(list(cfgs.values()), workers, progress=False)
    dense = hs[0].rank_bytes[0] / steps
    return stamp([{"scheme": k, "bytes/step": h.rank_bytes[0] / steps,
                   "vs sync fp32": dense / (h.rank_bytes[0] / steps)} for k, h in zip(cfgs, hs)],
                 "none", bytes={"bytes/step": "handed over"})


def main(argv=None):
    ap = bench_parser("robust", __doc__)
    ap.add_argument("--ns", type=int, nargs="+", default=[8, 16],
                    help="numbers of gradients each rule combines (default: 8 16)")
    ap.add_argument("--d", type=int, default=1_000_000, help="entries per gradient")
    ap.add_argument("--repeats", type=int, default=3, help="timed calls, their median reported")
    ap.add_argument("--quick", action="store_true", help="d = 100,000, one repeat, 16 steps")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    a = ap.parse_args([] if argv is None else argv)
    d, repeats, steps = (100_000, 1, 16) if a.quick else (a.d, a.repeats, 32)
    rules, avg = time_rules(a.ns, d, repeats), averaging_bytes(steps)
    if a.json:
        print(json.dumps({"rules": rules, "averaging": avg}))
    else:
        print_rows(rules, "robust rules: time to combine n gradients")
        print_rows(avg, "averaging schemes: bytes a step against sync fp32")
    return {"rules": rules, "averaging": avg}


if __name__ == "__main__":
    main(sys.argv[1:])
