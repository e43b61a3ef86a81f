"""``python -m lab ensemble``: train an ensemble on shards in parallel, distil it into one model."""
from __future__ import annotations

import argparse
import json

from ..textable import format_rows
from ..train.config import TrainConfig


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab ensemble", description=__doc__)
    p.add_argument("--workers", type=int, default=4, help="members, one per process and shard")
    p.add_argument("--model", default="mlp")
    p.add_argument("--data", default="digits")
    p.add_argument("--steps", type=int, default=150, help="training steps of each member")
    p.add_argument("--distill-steps", type=int, default=300, help="student steps (0: none)")
    p.add_argument("--batch-size", type=int, default=64, help="global; each member gets 1/workers")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    a = p.parse_args(argv)
    from .ensemble import train_ensemble
    try:
        cfg = TrainConfig(model=a.model, data=a.data, steps=a.steps, batch_size=a.batch_size,
                          lr=a.lr, seed=a.seed)
        r = train_ensemble(cfg, a.workers, a.distill_steps, progress=False)
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
