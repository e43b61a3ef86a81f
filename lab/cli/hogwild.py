"""``python -m lab hogwild``: lock-free shared-memory SGD in several processes.

    python -m lab hogwild --problem sparse --processes 4 --steps 20000 --lr 0.05
    python -m lab hogwild --problem counts --overlap          # how many updates are lost?
    python -m lab hogwild --problem mlp --steps 200 --lr 0.2   # the MLP on digits
"""
from __future__ import annotations

import json

from .args import integer, kind_type, number, parser as new_parser
from .formatting import with_defaults
from .runs import launch_failed

HELP = "lock-free shared-memory SGD in several processes"


def parser():
    """The parser of ``python -m lab hogwild``."""
    p = with_defaults(new_parser("python -m lab hogwild", __doc__))
    p.add_argument("--problem", type=kind_type("problem", "hogwild"), default="sparse",
                   help="sparse (a sparse SVM-like objective), counts (lost updates) or mlp")
    p.add_argument("--processes", type=integer(1), default=4, help="processes sharing the model")
    p.add_argument("--steps", type=integer(1), default=20000, help="SGD steps per process")
    p.add_argument("--lr", type=number(0, lo_open=True), default=0.05, help="learning rate")
    p.add_argument("--seed", type=int, default=0, help="seed of the data and the sampling")
    p.add_argument("--d", type=integer(1), default=None,
                   help="coordinates (sparse, counts) (default: 1000 for sparse, 64 for counts)")
    p.add_argument("--k", type=integer(1), default=8, help="nonzeros per example (sparse)")
    p.add_argument("--overlap", action="store_true", help="counts: all processes share coordinates")
    p.add_argument("--batch-size", type=integer(1), default=64, help="mlp: global batch")
    p.add_argument("--timeout", type=number(0, lo_open=True), default=300,
                   help="seconds before a silent process counts as hung")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


def main(argv=None) -> int:
    """``python -m lab hogwild ARGS``: the final objective, lost updates or accuracy."""
    p = parser()
    a = p.parse_args(argv)
    from ..sync.hogwild import hogwild
    from ..runtime import LaunchError
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
    except LaunchError as e:  # a process failed (lr too large, ...): one line, status 1
        return launch_failed(e)
    except ValueError as e:
        p.error(str(e))
    what = {"sparse": "objective", "counts": "lost updates", "mlp": "test accuracy"}[a.problem]
    row = {"problem": a.problem, "processes": a.processes, "steps/process": a.steps,
           "wall_s": round(r.wall_s, 3), what: r.final}
    print(json.dumps(row) if a.json else "  ".join(f"{k}: {v}" for k, v in row.items()))
    return 0
