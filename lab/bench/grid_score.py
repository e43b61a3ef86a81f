"""The grid's configurations and how the advisor is scored on them.

The timed grid's links (:data:`LINKS`); the held-out configurations kept out of both the
convergence curves and the timed grid (:data:`HELDOUT`, :data:`FRESH`, and :data:`DRAWN`,
drawn by :func:`draw_heldout`); and the score of a predicted ranking against a measured one
(:func:`score`: Spearman correlation, and whether the top pick is within :data:`WITHIN` of the
measured best), summed up over configurations by :func:`summary`. Part of
``python -m lab bench grid`` (:mod:`lab.bench.grid`).
"""
from __future__ import annotations

import math
import random

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


def summary(results: list[dict]) -> dict:
    """Mean and minimum Spearman, share of configurations with a top pick within 10%."""
    rho = [r["spearman"] for r in results]
    return {"configs": len(results), "spearman_mean": round(sum(rho) / len(rho), 4),
            "spearman_min": min(rho),
            "within_share": round(sum(r["within"] for r in results) / len(results), 4)}
