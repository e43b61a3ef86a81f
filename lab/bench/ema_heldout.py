"""``python -m lab bench ema_heldout``: AsyncMesh's EMA correction of a late sparse average on a
test that can fail (AsyncMesh, Ajanthan et al., arXiv 2601.22442, abstract and Sec. 4; the
rule is :mod:`lab.pipeline.sparse_avg`'s, our reading of the abstract).

Four replicas of one stage, each on its own contiguous shard of the training text
(``PipelineConfig(shards=True)``: non-identical data, so that the replicas drift apart and
averaging matters), average 5% of their parameters a step, non-blocking, the average arriving
``tau = 1, 4, 8`` steps late and merged by overwriting, by the EMA correction (beta 0.9, the
library's default; the paper gives none) or by the exact local-progress rule; against the
fresh average (``tau = 0``), full averaging and no averaging, which is what a rule that
discards every late average does. Each run is scored by the held-out loss of the replicas'
*mean* model at the end (real processes, lab.comm; the weights every rank ends with).

``share(rule, tau) = (H(overwrite) - H(rule)) / (H(overwrite) - H(fresh))``: the share of
overwriting's cost over the fresh average that ``rule`` recovers. ``--out FILE`` stores the
rows with the command, machine, load and date.
"""
from __future__ import annotations

import datetime
import json
import os
import sys
import time

import torch
from torch.nn.utils import vector_to_parameters

from .. import data as data_mod, models
from ..pipeline.ablation import ema_configs
from ..pipeline.emulate import heldout_loss
from ..pipeline.loop import run_raw
from ..pipeline.stages import split
from .made import stamp
from .table import bench_parser, machine, print_rows

TAUS = (1, 4, 8)
RULES = (("none", None), ("ema", 0.9), ("progress", None))
NAMES = {"none": "overwrite", "ema": "EMA 0.9", "progress": "exact progress"}


def mean_model_loss(cfg, ranks) -> float:
    """The held-out loss of the mean of every replica's final weights (one stage)."""
    data = data_mod.load(cfg.data, seed=cfg.seed, **cfg.data_kw)
    piece = split(models.make(cfg.model, data, seed=cfg.seed, **cfg.model_kw), 1)[0]
    vector_to_parameters(torch.stack([r["weights"] for r in ranks]).mean(0), piece.parameters())
    piece.eval()
    return heldout_loss([piece], data)


def name(key) -> str:
    if len(key) == 1:
        return {"fresh": "fresh (tau 0)", "full": "full averaging", "none": "no averaging"}[key[0]]
    return f"{NAMES[key[1]]}, tau {key[0]}"


def run(steps: int = 100, seeds=(0, 1, 2), fraction: float = 0.05) -> list[dict]:
    rows = []
    for s in seeds:
        cfgs = ema_configs(steps, taus=TAUS, fraction=fraction, rules=RULES, seed=s, shards=True)
        for key, ranks in zip(cfgs, run_raw(list(cfgs.values()), timeout=1800, progress=False)):
            lasts = [r for r in ranks if r["loss"] is not None]
            rows.append({"run": name(key), "tau": key[0] if len(key) > 1 else None, "seed": s,
                         "held-out loss (mean model)": round(mean_model_loss(cfgs[key], ranks), 5),
                         "train loss": round(float(sum(sum(r["loss"][-10:]) for r in lasts)
                                                   / (10 * len(lasts))), 5)})
    return stamp(rows, "none")


def shares(rows, seed: int, rule: str) -> dict[int, float]:
    """tau -> the share of overwriting's cost that ``rule`` (a run name's prefix, or "no
    averaging") recovers, for ``seed``."""
    H = {r["run"]: r["held-out loss (mean model)"] for r in rows if r["seed"] == seed}
    out = {}
    for t in TAUS:
        over = H[f"overwrite, tau {t}"]
        other = H["no averaging"] if rule == "no averaging" else H[f"{rule}, tau {t}"]
        out[t] = (over - other) / (over - H["fresh (tau 0)"])
    return out


def main(argv=None) -> int:
    p = bench_parser("ema_heldout", __doc__)
    p.add_argument("--steps", type=int, default=100, help="steps a run")
    p.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1")
    p.add_argument("--out", default=None, help="store the rows with provenance in this JSON file")
    a = p.parse_args(argv)
    t0, load = time.time(), os.getloadavg()[0]
    rows = run(a.steps, tuple(range(a.seeds)))
    meta = {"command": "python -m lab bench ema_heldout " + " ".join(argv or sys.argv[1:]),
            "machine": machine(), "torch": torch.__version__, "load_before": load,
            "load_after": os.getloadavg()[0], "date": datetime.date.today().isoformat(),
            "wall s": round(time.time() - t0, 1), "substrate": "measured (multi-process runner)"}
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    print_rows(rows, "merging a late average, 4 replicas on their own shards, 5% a step")
    return 0
