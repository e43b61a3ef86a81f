"""``python -m lab bench ps``: parameter-server throughput and bytes, and P3 on parameter
servers against MXNet's default KVStore (:func:`p3_table`, also
``python -m lab bench p3 --ps``).

For 2, 4 and 8 workers (plus the server, rank 0) on loopback: the server's updates and
gradients per second under ASP and BSP, and the bytes through the server per step of
``n`` gradients (sent + received, from its ledger) next to what one rank of an allreduce of
the same model hands to the network per step, and all ranks together (from their ledgers).
"""
from __future__ import annotations

import json

import numpy as np

from ..train import TrainConfig, train, train_many
from .made import stamp
from .table import bench_parser, print_rows


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
    return stamp(rows, "none", clock={"updates/s": "wall", "gradients/s": "wall"},
                 bytes={c: "handed over" for c in ("server B/step", "allreduce B/step/rank",
                                                  "allreduce B/step all")})


def main(argv=None) -> list[dict]:
    p = bench_parser("ps", __doc__)
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


#: label -> (servers, sync mode, sync_kw) of the P3 parameter-server table: each p3-ps beside
#: MXNet's default KVStore on as many servers (the paper's baseline); slicing alone (sliced,
#: FIFO) and priority alone (whole layers by priority) are the paper's ablation
P3_RUNS = {"kvstore, 1 server": (1, "kvstore", {}),
           "p3-ps, 1 server": (1, "p3-ps", {}),
           "kvstore, 2 servers": (2, "kvstore", {"servers": 2}),
           "p3-ps, 2 servers": (2, "p3-ps", {"servers": 2}),
           "p3-ps fifo, 2 servers": (2, "p3-ps", {"servers": 2, "priority": False}),
           "p3-ps unsliced, 2 servers": (2, "p3-ps", {"servers": 2, "slice_size": "inf"}),
           "kvstore, co-located": ("all", "kvstore", {"colocated": True}),
           "p3-ps, co-located": ("all", "p3-ps", {"colocated": True})}
#: the chapter's main comparison: 2 workers + 2 servers, p3-ps against the KVStore, with
#: slicing alone and priority alone
P3_MAIN = {k: P3_RUNS[k] for k in ("kvstore, 2 servers", "p3-ps, 2 servers",
                                   "p3-ps fifo, 2 servers", "p3-ps unsliced, 2 servers")}
P3_NETWORKS = ("100Mbps,0.1ms", "1Gbps,0.1ms", "3Gbps,0.1ms")


def p3_table(model="vgg", networks=P3_NETWORKS, ranks: int = 4, steps: int = 10,
             rounds: int = 3, warmup: int = 3, runs=None, link: str = "model") -> list[dict]:
    """P3 on parameter servers (:mod:`lab.sync.p3_server`) against MXNet's default KVStore
    (:mod:`lab.sync.kvstore`) on the same number of servers, on ``ranks`` ranks: per link and
    scheme, the measured step (the workers' compute plus exposed waits) as the median over
    ``rounds`` rounds (each round runs every (model, link, scheme) once, in one launch, so a
    slow phase of the machine hits every scheme alike) of each run's median step after
    ``warmup``; ``model``: a name of :data:`lab.bench.p3.MODELS` or a list of them;
    the KVStore's step over this scheme's, round by round (``x kvstore``: their median,
    ``range``, and from 6 rounds on the median's 95% interval, ``ratios``: every round's), and
    the final loss's distance from the KVStore's (the same sums: 0). ``link="kernel"``: the
    ranks sit on a kernel link (:mod:`lab.comm.kernel`) reshaped to each run's network."""
    from .p3 import config
    from .turns import interval_text
    runs = runs or P3_RUNS
    models = [model] if isinstance(model, str) else list(model)
    cfgs = [((m, n, label), config(m, "sync", n, steps).with_(sync=sync, sync_kw=kw, link=link))
            for _ in range(rounds) for m in models for n in networks
            for label, (_, sync, kw) in runs.items()]
    hs = train_many([c for _, c in cfgs], ranks, timeout=120 + 60 * len(cfgs), progress=False)
    per: dict = {}
    for (key, _), h in zip(cfgs, hs):
        per.setdefault(key, []).append((float(np.median(h.step_s[warmup:])), h.loss[-1]))
    rows = []
    for m, n, label in per:   # keys in the order of the first round: model, link, scheme
        servers = runs[label][0]
        ms = [1e3 * t for t, _ in per[m, n, label]]
        base = ("kvstore, co-located" if servers == "all"
                else f"kvstore, {servers} server" + ("s" if servers > 1 else ""))
        row = {"model": m, "link": n, "scheme": label,
               "servers": ranks if servers == "all" else servers,
               "workers": ranks if servers == "all" else ranks - servers,
               "ms/step": round(float(np.median(ms)), 1)}
        if base in runs and base != label:
            ratios = [1e3 * b / t for (b, _), t in zip(per[m, n, base], ms)]
            row.update({"x kvstore": round(float(np.median(ratios)), 3),
                        "range": f"{min(ratios):.2f}-{max(ratios):.2f}",
                        "95%": interval_text(ratios),
                        "ratios": [round(r, 4) for r in ratios],
                        "loss - kvstore": float(f"{per[m, n, label][0][1] - per[m, n, base][0][1]:.2g}")})
        rows.append(row)
    return stamp(rows, "kernel" if link == "kernel" else "modeled", clock={"ms/step": "wall"})
