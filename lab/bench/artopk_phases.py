"""``python -m lab bench artopk_phases [--steps S] [--seeds 0 1 2] [--kernel-seeds 0] [--out FILE]``:
adaptive AR-Topk against every fixed density and dense on the authors' twelve phases, p = 8.

Tyagi & Swany, BigData 2023 (arXiv 2312.02493), Sec. V: the link changes every 8 epochs through
twelve phases (:data:`lab.adaptive.AUTHORS_PHASES`). Here each phase lasts ``S`` steps (default
20), rescaled for the book's MLP (:func:`lab.adaptive.authors_schedule`, ``time_scale`` 0.25),
and each rank is an emulated device of ``device_s`` (default 20 ms) a step
(``TrainConfig.device_s``), so the fast phases are compute-bound and the slow ones
communication-bound: the one regime where the best fixed density can change between phases.
The warm-up is 5/8 of the first phase (the authors' 5 warm-up epochs of an 8-epoch phase).

Policies: ``adaptive`` (``adaptive_topk``, the authors' trigger: NSGA-II at each change of link,
on rank 0, its density broadcast), AR-Topk at each of the five candidates held fixed (same
warm-up, same switch of collective), dense fp32. Every seed on the modeled link; the
``--kernel-seeds`` again on a kernel link (:mod:`lab.comm.kernel`) where one can be made. Per
run it stores the held-out accuracy at every step and, per step, the ledger's alpha-beta
seconds, the measured seconds, the controller's seconds (decision on rank 0, its broadcast,
the gain probe) and the density: :func:`summary` turns them into steps to a target, modeled and
measured time to it, and regret. The JSON carries the command, machine, load and date.
"""
from __future__ import annotations

import datetime
import json
import math
import sys

import numpy as np

from .table import bench_parser, machine

POLICIES = ("adaptive", "d=0.1", "d=0.033", "d=0.011", "d=0.004", "d=0.001", "dense")
HIDDEN, TIME_SCALE, LR = 256, 0.25, 0.1


def configs(steps: int, seed: int, device_s: float, link: str = "model") -> list:
    """One TrainConfig per policy (POLICIES order) for ``seed``."""
    import lab.data
    import lab.models
    from ..adaptive import AUTHORS_CANDIDATES, authors_schedule
    from ..train import TrainConfig
    n = sum(p.numel() for p in lab.models.make("mlp", lab.data.load("digits"),
                                                hidden=HIDDEN).parameters())
    warm = round(steps * 5 / 8)
    base = dict(steps=12 * steps, lr=LR, eval_every=1, seed=seed, model_kw=dict(hidden=HIDDEN),
                network_schedule=authors_schedule(steps, n, TIME_SCALE), device_s=device_s,
                link=link)
    out = [TrainConfig(aggregator="adaptive_topk", label="adaptive",
                       aggregator_kw=dict(warmup_steps=warm, trigger="link"), **base)]
    out += [TrainConfig(aggregator="artopk", label=f"d={d}",
                        aggregator_kw=dict(density=d, warmup_steps=warm), **base)
            for d in sorted(AUTHORS_CANDIDATES, reverse=True)]
    return out + [TrainConfig(label="dense", **base)]


def record(h, seed: int, link: str) -> dict:
    """What :func:`summary` needs from one run, as lists of plain numbers."""
    s = h.series
    zero = [0.0] * h.steps
    r = lambda xs: [round(float(x), 7) for x in xs]  # noqa: E731
    return {"policy": h.name, "seed": seed, "link": link, "eval_step": list(h.eval_step),
            "test_acc": r(h.test_acc), "modeled_comm_s": r(h.modeled_comm_s),
            "step_s": r(h.step_s), "compute_s": r(h.compute_s), "bytes": list(h.bytes),
            "decide_s": r(s.get("decide_s", zero)), "share_s": r(s.get("share_s", zero)),
            "probe_s": r(s.get("probe_s", zero)), "density": r(s.get("density", [1.0] * h.steps)),
            "collective": list(s.get("collective", ["dense"] * h.steps))}


def run(steps=20, seeds=(0, 1, 2), kernel_seeds=(0,), device_s=0.02, workers=8) -> list[dict]:
    from ..comm import kernel
    from ..train import train_many
    out = []
    for link, ss in (("model", seeds), ("kernel", kernel_seeds if kernel.unavailable() is None
                                         else ())):
        for seed in ss:
            hs = train_many(configs(steps, seed, device_s, link), workers,
                            timeout=600 + 120 * steps, progress=False,
                            announce=f"artopk_phases {link} seed {seed}")
            out += [record(h, seed, link) for h in hs]
    return out


def steps_to(r: dict, target: float) -> int | None:
    """Steps until the first evaluation at or above ``target`` (None: never)."""
    return next((s for s, a in zip(r["eval_step"], r["test_acc"]) if a >= target), None)


def time_to(r: dict, target: float, clock: str, device_s: float) -> float:
    """Seconds to ``target``: ``"modeled"`` (device_s + the ledger's alpha-beta time, a step),
    ``"measured"``, or ``"measured, no controller"`` (less the decision, its broadcast and the
    gain probe); inf if never."""
    n = steps_to(r, target)
    if n is None:
        return math.inf
    if clock == "modeled":
        return n * device_s + float(np.sum(r["modeled_comm_s"][:n]))
    t = np.asarray(r["step_s"][:n])
    if clock == "measured, no controller":
        t = t - np.asarray(r["decide_s"][:n]) - np.asarray(r["share_s"][:n]) \
            - np.asarray(r["probe_s"][:n])
    return float(t.sum())


def summary(runs: list[dict], target: float, device_s: float) -> dict:
    """Per policy: per-seed steps to ``target``, modeled and measured times (modeled link) and
    kernel times, final accuracy; means over seeds; the best fixed density in hindsight (lowest
    mean modeled time among those that reach the target in every seed) and the adaptive run's
    regret (its time over another's, minus 1) against it, d = 0.1 and dense."""
    rows = {}
    for p in POLICIES:
        mine = [r for r in runs if r["policy"] == p and r["link"] == "model"]
        kern = [r for r in runs if r["policy"] == p and r["link"] == "kernel"]
        st = [steps_to(r, target) for r in mine]
        rows[p] = {"seeds": [r["seed"] for r in mine],
                   "steps": [math.inf if s is None else s for s in st],
                   "modeled_s": [time_to(r, target, "modeled", device_s) for r in mine],
                   "measured_s": [time_to(r, target, "measured", device_s) for r in mine],
                   "free_s": [time_to(r, target, "measured, no controller", device_s) for r in mine],
                   "kernel_s": [time_to(r, target, "measured", device_s) for r in kern],
                   "kernel_free_s": [time_to(r, target, "measured, no controller", device_s)
                                     for r in kern],
                   "final": [r["test_acc"][-1] for r in mine],
                   "decide_s": [float(np.sum(r["decide_s"])) for r in mine],
                   "share_s": [float(np.sum(r["share_s"])) for r in mine],
                   "run_s": [float(np.sum(r["step_s"])) for r in mine]}
        for k in ("steps", "modeled_s", "measured_s", "free_s", "kernel_s", "kernel_free_s",
                  "final"):
            rows[p][k + "_mean"] = float(np.mean(rows[p][k])) if rows[p][k] else math.nan
    fixed = [p for p in POLICIES if p.startswith("d=") and math.isfinite(rows[p]["modeled_s_mean"])]
    best = min(fixed, key=lambda p: rows[p]["modeled_s_mean"]) if fixed else None
    ad = rows["adaptive"]["modeled_s_mean"]
    regret = {name: ad / rows[p]["modeled_s_mean"] - 1 for name, p in
              (("best fixed", best), ("d=0.1", "d=0.1"), ("dense", "dense")) if p is not None}
    return {"rows": rows, "best": best, "regret": regret, "target": target, "device_s": device_s}


def main(argv=None) -> dict:
    ap = bench_parser("artopk_phases", __doc__)
    ap.add_argument("--steps", type=int, default=20, help="steps per phase (default 20)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds, modeled link")
    ap.add_argument("--kernel-seeds", type=int, nargs="*", default=[0],
                    help="seeds run again on a kernel link (default: 0)")
    ap.add_argument("--device-s", type=float, default=0.02, help="seconds a step per rank (20 ms)")
    ap.add_argument("--target", type=float, default=0.90, help="held-out accuracy target (0.90)")
    ap.add_argument("--quick", action="store_true", help="phases of 3 steps, one seed, no kernel")
    ap.add_argument("--out", metavar="FILE", help="write the runs and their provenance as JSON")
    a = ap.parse_args([] if argv is None else argv)
    if a.steps < 2 or not 0 < a.device_s <= 60 or not 0 < a.target <= 1:
        raise SystemExit("--steps must be >= 2, --device-s in (0, 60], --target in (0, 1]")
    steps, seeds, ks = (3, [0], []) if a.quick else (a.steps, a.seeds, a.kernel_seeds)
    import os
    with open("/proc/loadavg") as f:
        load = f"load {' '.join(f.read().split()[:3])} on {os.cpu_count()} cores"
    runs = run(steps, seeds, ks, a.device_s)
    out = {"command": "python -m lab bench artopk_phases " + " ".join(argv or []),
           "machine": machine(), "load_before": load, "date": datetime.date.today().isoformat(),
           "steps_per_phase": steps, "workers": 8, "device_s": a.device_s, "target": a.target,
           "time_scale": TIME_SCALE, "hidden": HIDDEN, "runs": runs}
    s = summary(runs, a.target, a.device_s)
    print(f"p=8, 12 phases x {steps} steps, device {1e3 * a.device_s:.0f} ms, target {a.target}")
    print(f"{'policy':>9} {'steps':>7} {'modeled s':>10} {'measured s':>11} {'kernel s':>9} "
          f"{'final acc':>10}")
    for p, r in s["rows"].items():
        print(f"{p:>9} {r['steps_mean']:>7.1f} {r['modeled_s_mean']:>10.2f} "
              f"{r['measured_s_mean']:>11.2f} {r['kernel_s_mean']:>9.2f} {r['final_mean']:>10.3f}")
    print(f"best fixed in hindsight: {s['best']}; adaptive's regret: " +
          ", ".join(f"vs {k} {v:+.1%}" for k, v in s["regret"].items()))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f)
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
