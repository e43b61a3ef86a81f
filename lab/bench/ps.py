"""``python -m lab bench ps``: parameter-server throughput and bytes (issue 12).

For 2, 4 and 8 workers (plus the server, rank 0) on loopback: the server's updates and
gradients per second under ASP and BSP, and the bytes through the server per step of
``n`` gradients (sent + received, from its ledger) next to what one rank of an allreduce of
the same model hands to the network per step, and all ranks together (from their ledgers).
"""
from __future__ import annotations

import argparse
import json

from ..train import TrainConfig, train, train_many
from .table import print_rows


def run(workers=(2, 4, 8), steps: int = 40, model: str = "mlp") -> list[dict]:
    rows = []
    for n in workers:
        base = TrainConfig(model=model, data="digits", steps=steps, batch_size=8 * n, lr=0.1,
                           eval_every=0)
        asp, bsp = train_many([base.with_(sync="asp"), base.with_(sync="bsp")], n + 1,
                              progress=False)
        ar = train(base, n, progress=False)
        ar_rank = sum(ar.bytes) / steps
        ar_all = sum(ar.rank_bytes) / steps
        for mode, h in (("asp", asp), ("bsp", bsp)):
            server = (sum(h.bytes) + sum(h.recv_bytes)) / steps
            rows.append({"workers": n, "mode": mode,
                         "updates/s": h.series["updates"] / h.wall_s,
                         "gradients/s": sum(h.series["grads_by_worker"]) / h.wall_s,
                         "server B/step": int(server),
                         "allreduce B/step/rank": int(ar_rank),
                         "allreduce B/step all": int(ar_all),
                         "server / allreduce rank": server / ar_rank})
    return rows


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(prog="python -m lab bench ps", description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=int, nargs="+", default=[2, 4, 8],
                   help="world sizes, the server included (default: 2 4 8)")
    p.add_argument("--steps", type=int, default=40, help="training steps per run")
    p.add_argument("--quick", action="store_true", help="2 and 4 workers, 15 steps")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    a = p.parse_args([] if argv is None else argv)
    if any(n < 1 for n in a.workers) or a.steps < 1:
        p.error("--workers and --steps must be positive")
    rows = run([2, 4] if a.quick else a.workers, 15 if a.quick else a.steps)
    if a.json:
        print(json.dumps(rows))
    else:
        print_rows(rows, "parameter server on loopback")
    return rows
