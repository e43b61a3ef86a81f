"""``python -m lab bench lookahead``: AsyncMesh's pipeline-axis comparisons as the authors make
them, each asynchronous run with weight stashing and against its own no-delay reference, on
the exact one-process emulator (:mod:`lab.pipeline.emulate`).

The runs (AsyncPP, Ajanthan et al., ICML 2025, Sec. 5, and the authors' code,
``PluralisResearch/AsyncPP``: every asynchronous stage stashes, ``num_versions =
num_warmup_minibatches + 1`` and ``load_old_params()`` before ``run_backward()``, which
recomputes the forward at those weights; ``--momentum`` 0.9 sets AdamW's betas; GPipe's
``sync_main.py`` uses AdamW's defaults), all with weight decay 0.01, clipping 10, warm-up +
cosine (``run.bash``):

- ``AdamW 0.9 + stash``: PipeDream, the authors' asynchronous baseline;
- ``AdamW 0.99 + stash``: the same at the look-ahead's beta1;
- ``NAdamW 0.99 + stash, mu = beta1``: the Nesterov term alone against the line above;
- ``NAdamW 0.99 + stash, compressed mu``: torch's mu_t schedule with psi = 0.004 x 50,000 / U,
  the authors' 50,000 updates squeezed into the run's U;
- ``authors``: NAdamW 0.99, stash + recompute, torch's psi = 0.004, as their code runs it;
- ``GPipe AdamW 0.9``: synchronous, at equal samples (one update a step) and at equal updates.

Each asynchronous run's *staleness cost* is its held-out loss minus its optimizer's on one
stage, where the same schedule has no delay. Two regimes: the chapter's 4 stages (2-layer GPT)
for 200 updates, and 8 stages (6-layer GPT, one unit a stage; delays 7..0, the largest on the
embedding) for 1,000. ``--out FILE`` stores the rows with the command, machine, load and date.
"""
from __future__ import annotations

import concurrent.futures as cf
import datetime
import json
import multiprocessing
import os
import sys
import time

import numpy as np
import torch

from ..pipeline import PipelineConfig
from ..pipeline.ablation import AUTHORS
from ..pipeline.emulate import emulate
from .made import stamp
from .table import bench_parser, machine, print_rows

#: per regime: stages -> (model_kw, steps); the asynchronous pipeline updates m = 2 times a step
REGIMES = {4: ({"layers": 2, "dim": 32}, 100), 8: ({"layers": 6, "dim": 32}, 500)}
#: the asynchronous runs: what differs, and the optimizer of its no-delay reference
RUNS = {
    "AdamW 0.9 + stash": dict(optimizer="adamw", beta1=0.9),
    "AdamW 0.99 + stash": dict(optimizer="adamw", beta1=0.99),
    "NAdamW 0.99 + stash, mu = beta1": dict(optimizer="nadamw", beta1=0.99, mu_schedule="constant"),
    "NAdamW 0.99 + stash, compressed mu": dict(optimizer="nadamw", beta1=0.99,
                                               mu_schedule="compressed"),
    "authors": dict(optimizer="nadamw", beta1=0.99, recompute=True),
}
GPIPE = {"GPipe AdamW 0.9, equal samples": 1, "GPipe AdamW 0.9, equal updates": 2}


def configs(stages: int, seed: int = 0, steps: int | None = None) -> dict[tuple, PipelineConfig]:
    """``(name, stages) -> config`` for the regime of ``stages``: every run of :data:`RUNS` and
    :data:`GPIPE` on ``stages`` stages, and each asynchronous run's no-delay reference (its
    optimizer on one stage: ``(name, 1)``)."""
    if stages not in REGIMES:
        raise ValueError(f"stages must be one of {sorted(REGIMES)}, got {stages!r}")
    model_kw, n = REGIMES[stages]
    n = steps or n
    warm = max(1, n // 10)
    b = dict(model="gpt", data="text", model_kw=dict(model_kw), microbatches=2, batch_size=32,
             lr=2e-3, seed=seed, **AUTHORS)
    out = {}
    for name, kw in RUNS.items():
        out[name, stages] = PipelineConfig(**b, **kw, stages=stages, steps=n, warmup=2 * warm,
                                           schedule="async-stash", label=name)
        ref = {k: v for k, v in kw.items() if k != "recompute"}  # one stage: nothing to stash
        out[name, 1] = PipelineConfig(**b, **ref, stages=1, steps=n, warmup=2 * warm,
                                      schedule="async", label=f"{name}, no delay")
    for name, f in GPIPE.items():
        out[name, stages] = PipelineConfig(**b, stages=stages, steps=f * n, warmup=f * warm,
                                           schedule="gpipe", optimizer="adamw", beta1=0.9, label=name)
    return out


def final(loss) -> float:
    """The mean training loss of the last tenth of the steps."""
    return float(np.mean(loss[-max(1, len(loss) // 10):]))


def _one(cfg: PipelineConfig) -> dict:
    t0 = time.process_time()
    e = emulate(cfg)
    return {"train loss": round(final(e["loss"]), 5), "held-out loss": round(e["heldout"], 5),
            "updates": e["updates"], "cpu s": round(time.process_time() - t0, 2)}


def run(stages=(4, 8), seeds=(0, 1, 2), jobs: int = 2, steps: dict | None = None) -> list[dict]:
    """One row per run, regime and seed, with its no-delay reference's held-out loss and the
    staleness cost (asynchronous runs)."""
    keys = [(S, s, k) for S in stages for s in seeds
            for k in configs(S, s, (steps or {}).get(S))]
    cfgs = [configs(S, s, (steps or {}).get(S))[k] for S, s, k in keys]
    ctx = multiprocessing.get_context("forkserver")
    with cf.ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
        res = dict(zip(keys, pool.map(_one, cfgs)))
    rows = []
    for (S, s, (name, depth)), r in res.items():
        if depth == 1:
            continue
        row = {"run": name, "stages": S, "seed": s, **r}
        ref = res.get((S, s, (name, 1)))
        if ref is not None:
            row["no delay held-out"] = ref["held-out loss"]
            row["staleness cost"] = round(r["held-out loss"] - ref["held-out loss"], 5)
            row["train staleness cost"] = round(r["train loss"] - ref["train loss"], 5)
        rows.append(row)
    return stamp(rows, "none", clock={"cpu s": "cpu"})


def cost(rows, name: str, stages: int) -> dict[int, float]:
    """Seed -> staleness cost of run ``name`` at ``stages``."""
    return {r["seed"]: r["staleness cost"] for r in rows if r["run"] == name and r["stages"] == stages}


def recovered(rows, base: str, method: str, stages: int) -> list[float]:
    """Per seed, the share of ``base``'s staleness cost that ``method`` recovers:
    ``1 - cost(method) / cost(base)``."""
    b, m = cost(rows, base, stages), cost(rows, method, stages)
    return [1.0 - m[s] / b[s] for s in sorted(b) if s in m]


def gaps(rows, name: str, ref: str, stages: int, col: str = "held-out loss") -> list[float]:
    """Per seed, ``name``'s ``col`` minus ``ref``'s."""
    get = lambda n: {r["seed"]: r[col] for r in rows if r["run"] == n and r["stages"] == stages}  # noqa: E731
    a, b = get(name), get(ref)
    return [a[s] - b[s] for s in sorted(a) if s in b]


def main(argv=None) -> int:
    p = bench_parser("lookahead", __doc__)
    p.add_argument("--quick", action="store_true", help="4 stages, one seed, 40 steps")
    p.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1")
    p.add_argument("--jobs", type=int, default=2, help="emulations side by side")
    p.add_argument("--out", default=None, help="store the rows with provenance in this JSON file")
    a = p.parse_args(argv)
    t0, load = time.time(), os.getloadavg()[0]
    if a.quick:
        rows = run(stages=(4,), seeds=(0,), jobs=a.jobs, steps={4: 40})
    else:
        rows = run(seeds=tuple(range(a.seeds)), jobs=a.jobs)
    meta = {"command": "python -m lab bench lookahead " + " ".join(argv or sys.argv[1:]),
            "machine": machine(), "torch": torch.__version__, "load_before": load,
            "load_after": os.getloadavg()[0], "date": datetime.date.today().isoformat(),
            "wall s": round(time.time() - t0, 1), "substrate": "emulator"}
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    print_rows(rows, "the look-ahead against the authors' baselines, each with its no-delay "
                     "reference (held-out loss, emulator)")
    return 0
