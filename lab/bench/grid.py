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
- **heldout**: configurations kept out of both (other links, world sizes, models; :data:`HELDOUT`
  or ``--configs MODEL:WORLD:LINK ...``), measured as the timed part measures them and ranked by
  :func:`lab.advise.advise`; per configuration the Spearman correlation of the two rankings and
  whether the advisor's top pick is within 10% of the measured best go to
  ``book/10_choosing/heldout.json``.

- **profiles**: the advisor's step profiles (:func:`lab.advise.measure`) of each model at each
  world size, to ``book/10_choosing/profiles.json``, so that the book reprices them (a faster
  compute, another link) without training.

``--repeats R`` measures every timed point R times (rows carry ``repeat``), for the spread.
``--merge`` measures only ``--methods`` and merges them into the stored file of the part: their
curves, rows or profiles replace or join the stored ones, the others' are kept as they are, the
steps, worlds, links and held-out configurations are the stored ones, and the held-out scores
are recomputed over all methods (every prediction again, from the stored profiles).
Every file records the command, the machine and the date that produced it (after a merge,
``_meta["merges"]`` lists the merging commands).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..advise.methods import TARGETS  # the grid's targets, re-exported
from .grid_runs import curves, heldout, settings, timed
from .grid_score import (DRAW_SEED, DRAWN, FRESH, HELDOUT, LINKS, WITHIN, _finite,  # noqa: F401
                         draw_heldout, median_times, score, summary)
from .grid_store import (CONVERGENCE, DRAWN_OUT, HELDOUT_OUT, PROFILES_OUT, ROOT,  # noqa: F401
                         TIMED, _settings_of, _stored, _write, describe, merge_rows,
                         merged_meta, provenance)
from .table import bench_parser


def _config(text: str):
    try:
        model, world, link = text.split(":", 2)
        return model, int(world), link
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--configs wants MODEL:WORLD:LINK, e.g. mlp:6:300Mbps,2ms, got {text!r}") from None


def main(argv=None) -> int:
    ap = bench_parser("grid", __doc__)
    ap.add_argument("--models", nargs="+", default=["mlp"], choices=sorted(TARGETS),
                    help="models (each has its target accuracy in TARGETS)")
    ap.add_argument("--workers", nargs="+", type=int, default=None,
                    help="world sizes (default 2 4 8; with --merge the stored ones)")
    ap.add_argument("--links", nargs="+", default=None,
                    help="links of the timed grid, e.g. 100Mbps,5ms (default "
                    f"{' '.join(LINKS)}; with --merge the stored ones)")
    ap.add_argument("--methods", nargs="+", default=None, help="methods (default: all)")
    ap.add_argument("--steps", type=int, default=None,
                    help="steps per run (default 120; with --merge the stored file's)")
    ap.add_argument("--eval-every", type=int, default=None,
                    help="steps between evaluations (default 5; with --merge the stored file's)")
    ap.add_argument("--part", choices=["convergence", "timed", "all", "heldout", "profiles"],
                    default="all", help="which part to run: all = convergence + timed; heldout "
                    "and profiles are separate")
    ap.add_argument("--configs", nargs="+", type=_config, default=None,
                    help="held-out configurations MODEL:WORLD:LINK (--part heldout; default "
                    "HELDOUT, with --merge the stored ones)")
    ap.add_argument("--out-heldout", type=Path, default=HELDOUT_OUT,
                    help="where the held-out validation goes")
    ap.add_argument("--out-profiles", type=Path, default=PROFILES_OUT,
                    help="where the step profiles go (--part profiles)")
    ap.add_argument("--repeats", type=int, default=1,
                    help="measure every timed point this many times (the spread)")
    ap.add_argument("--out-convergence", type=Path, default=CONVERGENCE,
                    help="where the convergence curves go")
    ap.add_argument("--out-timed", type=Path, default=TIMED, help="where the timed grid goes")
    ap.add_argument("--quick", action="store_true", help="2 world sizes, 40 steps: a smoke run")
    ap.add_argument("--merge", action="store_true",
                    help="measure only --methods and merge them into the part's stored file "
                    "(its steps, worlds, links and configurations; the others' results kept)")
    argv = sys.argv[1:] if argv is None else list(argv)
    a = ap.parse_args(argv)
    if any(w < 2 for w in a.workers or []):
        ap.error(f"--workers must all be >= 2, got {a.workers}")
    if (a.steps is not None and a.steps < 2) or (a.eval_every is not None and a.eval_every < 1) \
            or a.repeats < 1:
        ap.error("--steps must be >= 2, --eval-every and --repeats >= 1")
    if any(m not in TARGETS or w < 2 for m, w, _ in a.configs or []):
        ap.error(f"--configs: models must be in {sorted(TARGETS)}, worlds >= 2, got {a.configs}")
    if a.merge and (a.quick or (a.repeats > 1 and a.part != "heldout")):
        ap.error("--merge measures as the stored file did: no --quick, and --repeats only as "
                 "the held-out file's")
    if a.methods:
        from ..advise.methods import METHODS
        if unknown := [m for m in a.methods if m not in METHODS]:
            ap.error(f"--methods: unknown {unknown}; known: {', '.join(METHODS)}")
    if a.quick:
        a.workers, a.steps = (a.workers or [2, 4, 8])[:2], min(a.steps or 120, 40)
    meta = provenance(argv)
    steps = a.steps if a.steps is not None else 120
    every = a.eval_every if a.eval_every is not None else 5
    if a.part in ("convergence", "all"):
        data = {"_meta": meta}
        if a.merge:
            data = _stored(a, ap, a.out_convergence, *_settings_of(a.out_convergence, a.models))
            data["_meta"] = merged_meta(data["_meta"], meta)
        for model in a.models:
            old = data.get(model, {})
            n, ev = old.get("steps", steps), old.get("eval_every", every)
            ws = a.workers or sorted({int(w) for c in old.get("curves", {}).values()
                                      for w in c}) or [2, 4, 8]
            data[model] = {"target": TARGETS[model], "steps": n, "eval_every": ev,
                           "settings": {**old.get("settings", {}), **settings(model, a.methods)},
                           "curves": {**old.get("curves", {}),
                                      **curves(model, ws, n, ev, a.methods)}}
        _write(a.out_convergence, data)
    if a.part in ("timed", "all"):
        kept, was = [], []
        doc = {"_meta": meta, "targets": {m: TARGETS[m] for m in a.models}, "steps": steps,
               "eval_every": every}
        if a.merge:
            old = _stored(a, ap, a.out_timed, *_settings_of(a.out_timed))
            doc = {**old, "_meta": merged_meta(old["_meta"], meta),
                   "targets": {**old["targets"], **doc["targets"]}}
            was, kept = old["rows"], merge_rows(old["rows"], [], a.methods, a.models)
        rows: list = []
        for model in a.models:
            mine = [r for r in was if r["model"] == model]
            ws = a.workers or sorted({r["world"] for r in mine}) or [2, 4, 8]
            links = a.links or list(dict.fromkeys(r["link"] for r in mine)) or list(LINKS)
            done = len(rows)

            def flush(new, done=done):
                rows[done:] = new
                _write(a.out_timed, dict(doc, rows=kept + rows, partial=True))
            timed(model, ws, links, doc["steps"], doc["eval_every"], a.methods, flush, a.repeats)
        _write(a.out_timed, dict(doc, rows=kept + rows))
    if a.part == "heldout":
        doc = {"_meta": meta, "steps": steps, "eval_every": every, "within": WITHIN}
        configs, stored = a.configs or list(HELDOUT), None
        if a.merge:
            old = _stored(a, ap, a.out_heldout, *_settings_of(a.out_heldout))
            doc = {**doc, "_meta": merged_meta(old["_meta"], meta), "steps": old["steps"],
                   "eval_every": old["eval_every"]}
            stored = {(c["model"], c["world"], c["link"]): c for c in old["configs"]}
            configs = a.configs or list(stored)
            if a.repeats > 1 and a.repeats != old.get("repeats", 1):
                ap.error(f"--merge: --repeats {a.repeats} differs from {old.get('repeats', 1)} "
                         f"in {a.out_heldout}")
            a.repeats = old.get("repeats", 1)   # the merged rows as the stored ones

        def flush_heldout(results):
            _write(a.out_heldout, dict(doc, partial=True, summary=summary(results),
                                       configs=results))
        if a.repeats > 1:
            doc["repeats"] = a.repeats
        results = heldout(configs, doc["steps"], doc["eval_every"], a.methods, flush_heldout,
                          stored, a.repeats)
        _write(a.out_heldout, dict(doc, summary=summary(results), configs=results))
    if a.part == "profiles":
        from dataclasses import asdict
        from ..advise import METHODS, measure
        chosen = [METHODS[m] for m in (a.methods or METHODS)]
        doc = {"_meta": meta, "profiles": {}}
        if a.merge:
            doc = _stored(a, ap, a.out_profiles, a.steps, a.eval_every)
            doc["_meta"] = merged_meta(doc["_meta"], meta)
        for model in a.models:
            have = doc["profiles"].setdefault(model, {})
            for w in a.workers or sorted(int(k) for k in have) or [2, 4, 8]:
                have[str(w)] = {**have.get(str(w), {}), **{
                    k: asdict(v) for k, v in measure(chosen, model, w).items()}}
        _write(a.out_profiles, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
