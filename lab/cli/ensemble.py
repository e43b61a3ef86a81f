"""``python -m lab ensemble``: train an ensemble on shards in parallel, distil it into one model.

    python -m lab ensemble --workers 4 --distill-steps 300
"""
from __future__ import annotations

import json

from .args import integer, kind_type, number, parser as new_parser
from .formatting import with_defaults
from .runs import launch_failed

HELP = "train an ensemble on shards, distil it"


def parser():
    """The parser of ``python -m lab ensemble``."""
    p = with_defaults(new_parser("python -m lab ensemble", __doc__))
    p.add_argument("--workers", type=integer(1), default=4, help="members, one per process and shard")
    p.add_argument("--model", default="mlp", type=kind_type("model", "ensemble"), help="each member's model")
    p.add_argument("--data", default="digits", type=kind_type("data", "ensemble"),
                   help="a classification data set (digits, blobs)")
    p.add_argument("--steps", type=integer(1), default=150, help="training steps of each member")
    p.add_argument("--distill-steps", type=integer(0), default=300, help="student steps (0: none)")
    p.add_argument("--batch-size", type=integer(1), default=64,
                   help="global; each member gets 1/workers")
    p.add_argument("--lr", type=number(0, lo_open=True), default=0.1, help="learning rate")
    p.add_argument("--seed", type=int, default=0, help="seed of the models and shards")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


def main(argv=None) -> int:
    """``python -m lab ensemble ARGS``: members' and ensemble's held-out accuracy."""
    p = parser()
    a = p.parse_args(argv)
    from ..averaging.ensemble import train_ensemble
    from ..runtime import LaunchError
    from ..textable import format_rows
    from ..train import TrainConfig
    try:
        cfg = TrainConfig(model=a.model, data=a.data, steps=a.steps, batch_size=a.batch_size,
                          lr=a.lr, seed=a.seed)
        r = train_ensemble(cfg, a.workers, a.distill_steps, progress=False)
    except LaunchError as exc:  # a member failed (its loss blew up, ...): one line, status 1
        return launch_failed(exc)
    except (ValueError, TypeError) as exc:
        p.error(str(exc))
    if a.json:
        print(json.dumps(r))
        return 0
    rows = [{"model": f"member {i}", "test_acc": f"{acc:.4f}"}
            for i, acc in enumerate(r["member_acc"])]
    rows.append({"model": "ensemble (mean logits)", "test_acc": f"{r['ensemble_acc']:.4f}"})
    if r["student_acc"] is not None:
        rows.append({"model": "distilled student", "test_acc": f"{r['student_acc']:.4f}"})
    print(format_rows(rows))
    print(f"bytes sent per rank (logit allgather): {r['rank_bytes']}")
    return 0
