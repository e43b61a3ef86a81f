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
import datetime
import json
import math
import random
import sys
from pathlib import Path

import torch

from ..advise.methods import TARGETS  # the grid's targets, re-exported
from .made import stamp
from .table import bench_parser, machine

ROOT = Path(__file__).resolve().parents[2]
CONVERGENCE = ROOT / "lab" / "advise" / "convergence.json"
TIMED = ROOT / "book" / "10_choosing" / "grid.json"
HELDOUT_OUT = ROOT / "book" / "10_choosing" / "heldout.json"
#: where the :data:`DRAWN` configurations' measurement is stored (``--out-heldout``)
DRAWN_OUT = ROOT / "book" / "10_choosing" / "heldout_drawn.json"
PROFILES_OUT = ROOT / "book" / "10_choosing" / "profiles.json"
LINKS = ("100Mbps,5ms", "1Gbps,1ms", "10Gbps,0.1ms")
#: Held-out configurations (model, world, link): links and models (the cnn is not in the timed
#: grid; the linear model has no convergence curves at all) that the timed grid did not measure.
#: World sizes must divide the global batch of 64, so the only unmeasured one is 16, too many
#: ranks for two cores: the held-out worlds are 2, 4 and 8 on other links and models. The first
#: six were scored before the advisor pooled the machine's share of a step and probed a model
#: without curves (changes made after reading their errors); the last four (:data:`FRESH`) were
#: added with those changes and measured for the first time with them.
HELDOUT = (("mlp", 8, "300Mbps,2ms"), ("mlp", 4, "5Gbps,0.2ms"), ("mlp", 2, "200Mbps,5ms"),
           ("cnn", 4, "500Mbps,0.5ms"), ("linear", 4, "300Mbps,2ms"), ("linear", 8, "3Gbps,0.1ms"),
           ("mlp", 4, "700Mbps,3ms"), ("cnn", 2, "2Gbps,0.3ms"), ("cnn", 8, "150Mbps,1ms"),
           ("linear", 2, "1Gbps,10ms"))
FRESH = HELDOUT[6:]
#: Six more, drawn at random (:func:`draw_heldout` with :data:`DRAW_SEED`) and frozen here
#: before any of them was run (commit "Part 10: six held-out configurations drawn"), so that
#: nothing about the advisor was chosen with them in sight; the book scores them on their own.
DRAW_SEED = 20261127
DRAWN = (("mlp", 8, "330Mbps,0.2ms"), ("mlp", 2, "370Mbps,0.2ms"), ("cnn", 2, "3900Mbps,0.6ms"),
         ("mlp", 8, "260Mbps,1ms"), ("linear", 8, "960Mbps,2ms"), ("mlp", 2, "780Mbps,7ms"))


def draw_heldout(seed: int = DRAW_SEED, n: int = 6) -> tuple:
    """``n`` configurations (model, world, link) drawn with ``random.Random(seed)``: a model of
    the advisor's, a world of 2, 4 or 8, a bandwidth log-uniform in 100 Mb/s to 10 Gb/s (two
    significant digits) and a latency log-uniform in 0.05 to 10 ms (one)."""
    rng, out = random.Random(seed), []
    while len(out) < n:
        model, world = rng.choice(("mlp", "cnn", "linear")), rng.choice((2, 4, 8))
        mbps, ms = 10 ** rng.uniform(2, 4), 10 ** rng.uniform(math.log10(0.05), 1)
        c = (model, world, f"{float(f'{mbps:.2g}'):g}Mbps,{float(f'{ms:.1g}'):g}ms")
        if c not in out:
            out.append(c)
    return tuple(out)
WITHIN = 0.10   # a top pick "within 10%" of the measured best


def provenance(argv) -> dict:
    """What produced a file: the command, the machine, torch and the date."""
    return {"command": "python -m lab bench grid " + " ".join(argv), "machine": machine(),
            "torch": torch.__version__, "date": datetime.date.today().isoformat()}


def describe(meta: dict) -> str:
    """A stored file's provenance as a reader sees it: the command, machine, torch and date
    that produced it, then each ``--merge`` into it."""
    lines = [f"produced by: {meta['command']}",
             f"on {meta['machine']}, torch {meta['torch']}, {meta['date']}"]
    lines += [f"merged: {m['command']} (on {m['machine']}, {m['date']})"
              for m in meta.get("merges", [])]
    return "\n".join(lines)


def settings(model: str, methods=None) -> dict:
    """Each method's TrainConfig as the grid ran it (the advisor uses a curve only for the same
    settings)."""
    from ..advise.methods import METHODS, base_config
    return {name: METHODS[name].config(base_config(model)).to_dict()
            for name in (methods or METHODS)}


def curves(model: str, worlds, steps: int, eval_every: int, methods=None) -> dict:
    """``{method: {world: [[step, acc], ...]}}``: held-out accuracy along each run."""
    from ..advise.curves import measure_curves
    from ..advise.methods import METHODS
    methods = [METHODS[m] for m in (methods or METHODS)]
    out: dict = {m.name: {} for m in methods}
    for w in worlds:
        for name, curve in measure_curves(methods, model, w, steps, eval_every).items():
            out[name][str(w)] = curve
    return out


def timed(model: str, worlds, links, steps: int, eval_every: int, methods=None,
          flush=None, repeats: int = 1) -> list[dict]:
    """One row per (method, world, link, repeat): measured seconds to the target (and on the
    link's modeled clock), bytes per step. ``flush(rows)`` is called after each (world, link),
    so a long grid keeps what it measured."""
    from ..advise.methods import METHODS, base_config
    from ..train import train_many
    methods = [METHODS[m] for m in (methods or METHODS)]
    rows = []
    for w in worlds:
        for link in links:
            cfgs = [m.config(base_config(model, steps, eval_every)).with_(network=link) for m in methods]
            for r in range(repeats):
                for m, h in zip(methods, train_many(cfgs, w, progress=False,
                                                    timeout=600 + 120 * len(methods))):
                    rows.append({"model": model, "method": m.name, "family": m.family, "world": w,
                                 "link": link, "time_s": _finite(h.time_to(TARGETS[model])),
                                 "modeled_s": _finite(h.time_to(TARGETS[model], "modeled")),
                                 "step_s": round(float(h.step_s.mean()), 5),
                                 "bytes_per_step": float(sum(h.bytes) / h.steps),
                                 "final_acc": round(h.test_acc[-1], 4),
                                 **({"repeat": r} if repeats > 1 else {})})
                    stamp(rows[-1:], h.link, clock={"time_s": "wall", "modeled_s": "modeled",
                                                    "step_s": "wall"},
                          bytes={"bytes_per_step": "handed over"})
            if flush is not None:
                flush(rows)
    return rows


def _finite(t: float):
    return None if t == float("inf") else round(t, 4)


def score(predicted: dict, measured: dict) -> dict:
    """How well a predicted ranking matches a measured one. Both map method -> seconds to the
    target (None or inf: never reached, ranked last). Returns the Spearman correlation of the
    two orders, the advisor's top pick, the measured best, the pick's measured time over the
    best's and whether that is within :data:`WITHIN`."""
    from scipy.stats import spearmanr
    names = sorted(predicted)
    if set(names) != set(measured) or len(names) < 2:
        raise ValueError(f"predicted and measured must name the same >= 2 methods, got "
                         f"{sorted(predicted)} and {sorted(measured)}")
    inf = float("inf")
    pred = [inf if predicted[n] is None else predicted[n] for n in names]
    meas = [inf if measured[n] is None else measured[n] for n in names]
    pick = min(names, key=lambda n: pred[names.index(n)])
    best = min(names, key=lambda n: meas[names.index(n)])
    ratio = meas[names.index(pick)] / meas[names.index(best)]
    return {"spearman": round(float(spearmanr(pred, meas).statistic), 4), "pick": pick,
            "best": best, "pick_over_best": round(ratio, 4), "within": bool(ratio <= 1 + WITHIN)}


def median_times(rows) -> dict:
    """``{method: seconds to target}``: the median over a method's repeated rows (a run that
    never reached the target counts as infinitely slow; None if the median did not)."""
    import statistics
    inf, by = float("inf"), {}
    for r in rows:
        by.setdefault(r["method"], []).append(inf if r["time_s"] is None else r["time_s"])
    return {m: _finite(statistics.median(ts)) for m, ts in by.items()}


def heldout(configs, steps: int, eval_every: int, methods=None, flush=None,
            stored: dict | None = None, repeats: int = 1) -> list[dict]:
    """Each held-out (model, world, link) measured by :func:`timed` (``repeats`` times, the
    median kept) and predicted as :func:`lab.advise.advise` does (profiles taken on this
    machine at that world size, stored with the result; a model without stored curves probed
    on two ranks), scored. ``stored``: earlier results by (model, world, link), whose other
    methods' rows, times and profiles are kept and predicted again with these (``--merge``)."""
    from dataclasses import asdict
    from ..advise import METHODS, StepProfile, curves_for, measure, predict
    from ..comm.network import Network
    out = []
    for model, world, link in configs:
        rows = timed(model, [world], [link], steps, eval_every, methods, repeats=repeats)
        measured = median_times(rows)
        profiles = measure([METHODS[m] for m in (methods or METHODS)], model, world)
        fresh = {k: asdict(v) for k, v in profiles.items()}
        kept = (stored or {}).get((model, world, link), {})
        if kept:   # the stored profiles as they were, the named methods' replaced
            rows = [r for r in kept["rows"] if r["method"] not in measured] + rows
            measured = {**kept["measured"], **measured}
            fresh = {**kept["profiles"], **fresh}
            profiles = {k: StepProfile(**v) for k, v in fresh.items()}
        conv = curves_for(model, [METHODS[m] for m in profiles], TARGETS[model])
        preds = predict(profiles, world, Network.parse(link), model, conv=conv,
                        target=TARGETS[model])
        predicted = {p.method: (None if p.time_s == float("inf") else round(p.time_s, 4))
                     for p in preds}
        out.append({"model": model, "world": world, "link": link, "target": TARGETS[model],
                    **score(predicted, measured), "predicted": predicted, "measured": measured,
                    "reasons": {p.method: p.reason for p in preds}, "rows": rows,
                    "profiles": fresh, **({"curves": conv} if conv else {})})
        if flush is not None:
            flush(out)
    return out


def summary(results: list[dict]) -> dict:
    """Mean and minimum Spearman, share of configurations with a top pick within 10%."""
    rho = [r["spearman"] for r in results]
    return {"configs": len(results), "spearman_mean": round(sum(rho) / len(rho), 4),
            "spearman_min": min(rho),
            "within_share": round(sum(r["within"] for r in results) / len(results), 4)}


def merged_meta(old: dict, meta: dict) -> dict:
    """The stored file's provenance with this merging command appended to its ``merges``."""
    return {**old, "merges": old.get("merges", []) + [meta]}


def merge_rows(old: list[dict], new: list[dict], methods, models) -> list[dict]:
    """``old`` rows with those of ``methods`` on ``models`` replaced by ``new`` (appended)."""
    return [r for r in old if not (r["method"] in methods and r["model"] in models)] + new


def _stored(a, ap, path: Path, steps: int, eval_every: int) -> dict:
    """The stored file a ``--merge`` goes into, checked against the command's settings."""
    if not a.methods:
        ap.error("--merge needs --methods: the methods to measure and merge")
    if not path.exists():
        ap.error(f"--merge: no stored file {path} to merge into")
    old = json.loads(path.read_text())
    if old.get("partial"):
        ap.error(f"--merge: {path} is a partial run")
    for flag, mine, theirs in (("--steps", a.steps, steps), ("--eval-every", a.eval_every,
                                                              eval_every)):
        if mine is not None and mine != theirs:
            ap.error(f"--merge: {flag} {mine} differs from {theirs} in {path}")
    return old


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


def _settings_of(path: Path, models=None) -> tuple:
    """(steps, eval_every) a stored file was measured with: the timed or held-out file's, or
    (``models``) the convergence file's for the first of them (None if absent)."""
    if not path.exists():
        return None, None
    data = json.loads(path.read_text())
    data = data.get(models[0], {}) if models else data
    return data.get("steps"), data.get("eval_every")


def _write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
