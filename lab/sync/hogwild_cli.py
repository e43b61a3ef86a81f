"""``python -m lab hogwild``: lock-free shared-memory SGD in several processes.

    python -m lab hogwild --problem sparse --processes 4 --steps 20000 --lr 0.05
    python -m lab hogwild --problem counts --overlap          # how many updates are lost?
    python -m lab hogwild --problem mlp --steps 200 --lr 0.2   # the MLP on digits
"""
from __future__ import annotations

import argparse
import json

from .hogwild import PROBLEMS, hogwild


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab hogwild", description=__doc__.splitlines()[0])
    p.add_argument("--problem", choices=PROBLEMS, default="sparse")
    p.add_argument("--processes", type=int, default=4)
    p.add_argument("--steps", type=int, default=20000, help="SGD steps per process")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--d", type=int, default=None, help="coordinates (sparse, counts)")
    p.add_argument("--k", type=int, default=8, help="nonzeros per example (sparse)")
    p.add_argument("--overlap", action="store_true", help="counts: all processes share coordinates")
    p.add_argument("--batch-size", type=int, default=64, help="mlp: global batch")
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    kw = {}
    if a.problem == "sparse":
        kw = dict(k=a.k, **({"d": a.d} if a.d else {}))
    elif a.problem == "counts":
        kw = dict(overlap=a.overlap, **({"d": a.d} if a.d else {}))
    else:
        from ..train import TrainConfig
        kw = dict(cfg=TrainConfig(lr=a.lr, batch_size=a.batch_size, seed=a.seed))
    try:
        r = hogwild(a.problem, a.processes, a.steps, a.lr, a.seed, timeout=a.timeout, **kw)
    except ValueError as e:
        p.error(str(e))
    what = {"sparse": "objective", "counts": "lost updates", "mlp": "test accuracy"}[a.problem]
    row = {"problem": a.problem, "processes": a.processes, "steps/process": a.steps,
           "wall_s": round(r.wall_s, 3), what: r.final}
    print(json.dumps(row) if a.json else "  ".join(f"{k}: {v}" for k, v in row.items()))
    return 0
