"""Every method on one grid: convergence per world size, and measured time to target per link.

``python -m lab bench grid [--models mlp cnn] [--workers 2 4 8] [--links 100Mbps,1ms ...]
[--steps N] [--part convergence|timed|all] [--out-convergence F] [--out-timed F] [--quick]``

- **convergence** (no emulated link: a synchronous method's steps do not depend on it): each
  method of :data:`lab.advise.METHODS` trains each model at each world size, evaluated every few
  steps; the curves go to ``lab/advise/convergence.json``, the advisor's convergence penalties.
- **timed**: each method on each (world size, link) of the grid, the link emulated, until the
  steps run out; the measured seconds to the model's target accuracy go to
  ``book/10_choosing/grid.json``, the map of Part 10 and the ground truth the advisor is checked
  against.

Both files record the command, the machine and the date that produced them.
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

import torch

from .table import machine

ROOT = Path(__file__).resolve().parents[2]
CONVERGENCE = ROOT / "lab" / "advise" / "convergence.json"
TIMED = ROOT / "book" / "10_choosing" / "grid.json"
TARGETS = {"mlp": 0.9, "cnn": 0.9, "linear": 0.85}
LINKS = ("100Mbps,5ms", "1Gbps,1ms", "10Gbps,0.1ms")


def provenance(argv) -> dict:
    """What produced a file: the command, the machine, torch and the date."""
    return {"command": "python -m lab bench grid " + " ".join(argv), "machine": machine(),
            "torch": torch.__version__, "date": datetime.date.today().isoformat()}


def settings(model: str, methods=None) -> dict:
    """Each method's TrainConfig as the grid ran it (the advisor uses a curve only for the same
    settings)."""
    from ..advise.methods import METHODS, base_config
    return {name: METHODS[name].config(base_config(model)).to_dict()
            for name in (methods or METHODS)}


def curves(model: str, worlds, steps: int, eval_every: int, methods=None) -> dict:
    """``{method: {world: [[step, acc], ...]}}``: held-out accuracy along each run."""
    from ..advise.methods import METHODS, base_config
    from ..train import train_many
    methods = [METHODS[m] for m in (methods or METHODS)]
    out: dict = {m.name: {} for m in methods}
    for w in worlds:
        hists = train_many([m.config(base_config(model, steps, eval_every)) for m in methods], w,
                           progress=False, timeout=600 + 60 * len(methods))
        for m, h in zip(methods, hists):
            out[m.name][str(w)] = [[s, round(a, 4)] for s, a in zip(h.eval_step, h.test_acc)]
    return out


def timed(model: str, worlds, links, steps: int, eval_every: int, methods=None) -> list[dict]:
    """One row per (method, world, link): measured seconds to the target, bytes per step."""
    from ..advise.methods import METHODS, base_config
    from ..train import train_many
    methods = [METHODS[m] for m in (methods or METHODS)]
    rows = []
    for w in worlds:
        for link in links:
            cfgs = [m.config(base_config(model, steps, eval_every)).with_(network=link) for m in methods]
            for m, h in zip(methods, train_many(cfgs, w, progress=False,
                                                timeout=600 + 120 * len(methods))):
                t = h.time_to(TARGETS[model])
                rows.append({"model": model, "method": m.name, "family": m.family, "world": w,
                             "link": link, "time_s": None if t == float("inf") else round(t, 4),
                             "step_s": round(float(h.step_s.mean()), 5),
                             "bytes_per_step": float(sum(h.bytes) / h.steps),
                             "final_acc": round(h.test_acc[-1], 4)})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lab bench grid", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["mlp"], choices=sorted(TARGETS),
                    help="models (each has its target accuracy in TARGETS)")
    ap.add_argument("--workers", nargs="+", type=int, default=[2, 4, 8], help="world sizes")
    ap.add_argument("--links", nargs="+", default=list(LINKS),
                    help="links of the timed grid, e.g. 100Mbps,5ms")
    ap.add_argument("--methods", nargs="+", default=None, help="methods (default: all)")
    ap.add_argument("--steps", type=int, default=120, help="steps per run")
    ap.add_argument("--eval-every", type=int, default=5, help="steps between evaluations")
    ap.add_argument("--part", choices=["convergence", "timed", "all"], default="all",
                    help="which half of the grid to run")
    ap.add_argument("--out-convergence", type=Path, default=CONVERGENCE,
                    help="where the convergence curves go")
    ap.add_argument("--out-timed", type=Path, default=TIMED, help="where the timed grid goes")
    ap.add_argument("--quick", action="store_true", help="2 world sizes, 40 steps: a smoke run")
    argv = sys.argv[1:] if argv is None else list(argv)
    a = ap.parse_args(argv)
    if any(w < 2 for w in a.workers):
        ap.error(f"--workers must all be >= 2, got {a.workers}")
    if a.steps < 2 or a.eval_every < 1:
        ap.error("--steps must be >= 2 and --eval-every >= 1")
    if a.quick:
        a.workers, a.steps = a.workers[:2], min(a.steps, 40)
    meta = provenance(argv)
    if a.part in ("convergence", "all"):
        data = {"_meta": meta}
        for model in a.models:
            data[model] = {"target": TARGETS[model], "steps": a.steps, "eval_every": a.eval_every,
                           "settings": settings(model, a.methods),
                           "curves": curves(model, a.workers, a.steps, a.eval_every, a.methods)}
        _write(a.out_convergence, data)
    if a.part in ("timed", "all"):
        rows = [r for model in a.models
                for r in timed(model, a.workers, a.links, a.steps, a.eval_every, a.methods)]
        _write(a.out_timed, {"_meta": meta, "targets": {m: TARGETS[m] for m in a.models},
                             "rows": rows})
    return 0


def _write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
