"""Convergence curves: held-out accuracy against steps, the other input of the advisor.

The book's models have theirs stored in ``convergence.json`` (``python -m lab bench grid --part
convergence``). For a model without stored curves, :func:`probed` measures them once on two
local ranks with no emulated link (the link changes how long a step takes, not what a
synchronous method computes) and caches them beside the profiles, so that the model's
penalties are its own instead of borrowed from other models: a convex model can rank the
methods' step counts quite differently (on the linear model Signum needs 2.4 times fp32's
steps, on the MLP and the CNN fewer than fp32). The penalty at any world size is then read at
two ranks (:func:`lab.advise.estimate.penalty` takes the nearest measured world); on the linear
model the steps to the target differ by at most one evaluation between 2, 4 and 8 ranks.
"""
from __future__ import annotations

import json

from .methods import METHODS, TARGETS, Method, base_config
from .profile import _digest, _machine, cache_dir, say, write_cache

PROBE_WORLD, PROBE_STEPS, PROBE_EVERY = 2, 120, 5


def measure_curves(methods: list[Method], model: str, world: int, steps: int,
                   eval_every: int, progress: bool = False) -> dict:
    """``{method: [[step, accuracy], ...]}`` of one launch of ``world`` ranks training each of
    ``methods`` on ``model`` from ``lab.advise.methods.base_config``, evaluated every
    ``eval_every`` steps (``progress``: a line on stderr as each method is done)."""
    from ..train import train_many
    hists = train_many([m.config(base_config(model, steps, eval_every)) for m in methods], world,
                       progress=False, timeout=600 + 60 * len(methods),
                       announce="lab advise:   measured" if progress else None)
    return {m.name: [[s, round(a, 4)] for s, a in zip(h.eval_step, h.test_acc)]
            for m, h in zip(methods, hists)}


def probed(model: str, methods: list[Method] | None = None, target: float | None = None,
           use_cache: bool = True, progress: bool = False) -> dict:
    """The curves of ``methods`` (default: all) on ``model`` measured at ``PROBE_WORLD``
    ranks for ``PROBE_STEPS`` steps, in the form :func:`lab.advise.convergence`
    returns (``target``, ``settings``, ``curves``). Cached per machine, model and method
    settings; measured only for the methods missing from the cache (``progress``: said on
    stderr, with a line per method)."""
    target = TARGETS.get(model) if target is None else target
    if target is None:
        raise ValueError(f"model {model!r} has no stored curves and no default target accuracy "
                         f"(known: {', '.join(TARGETS)}): give target=")
    methods = list(METHODS.values()) if methods is None else methods
    base = base_config(model, PROBE_STEPS, PROBE_EVERY)
    path = cache_dir() / f"{_machine()}-{model}-curves-w{PROBE_WORLD}-v1.json"
    cached = json.loads(path.read_text()) if use_cache and path.exists() else {}
    digest = {m.name: _digest(m.config(base)) for m in methods}
    todo = [m for m in methods if cached.get(m.name, {}).get("config") != digest[m.name]]
    if todo:
        if progress:
            say(f"measuring {model}'s convergence curves for {len(todo)} methods on "
                f"{PROBE_WORLD} local ranks, {PROBE_STEPS} steps each (once: about half a "
                f"minute); " + (f"cached in {path}" if use_cache else "not cached"))
        got = measure_curves(todo, model, PROBE_WORLD, PROBE_STEPS, PROBE_EVERY, progress)
        cached.update({name: {"config": digest[name], "curve": curve} for name, curve in got.items()})
        if use_cache:
            write_cache(path, cached)
    settings = {m.name: json.loads(json.dumps(m.config(base).to_dict(), default=str))
                for m in methods}
    return {"target": target, "steps": PROBE_STEPS, "eval_every": PROBE_EVERY, "probed": True,
            "settings": settings,
            "curves": {m.name: {str(PROBE_WORLD): cached[m.name]["curve"]} for m in methods}}
