"""The grid's measurements: convergence curves, timed runs to the target, held-out configurations.

Each method of :data:`lab.advise.METHODS` is trained as the grid trains it (:func:`settings`):
:func:`curves` without an emulated link, :func:`timed` on each (world size, link) until the
steps run out, :func:`heldout` on configurations kept out of both, measured as :func:`timed`
measures them and predicted as :func:`lab.advise.advise` does, then scored
(:mod:`lab.bench.grid_score`). Part of ``python -m lab bench grid`` (:mod:`lab.bench.grid`).
"""
from __future__ import annotations

from ..advise.methods import TARGETS
from .grid_score import _finite, median_times, score
from .made import stamp


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
