"""The schedule table of Part 7's bench, and its A/A control.

:func:`schedule_table`: time per step of every schedule, measured in interleaved turns
(:func:`~lab.bench.turns.turns`, median of the rounds) and predicted
(:func:`lab.schedule.plan.predict` on per-layer times scaled to ``sync``'s own compute in the
same session), with the speedups, their intervals and the bound (C+T)/max(C,T).
:func:`aa_control`: one schedule against itself in turns, which must measure 1.00. Part of
``python -m lab bench p3`` (:mod:`lab.bench.p3`).
"""
from __future__ import annotations

import numpy as np

from ..schedule import plan
from ..train import train_many
from .made import link_of, stamp
from .p3_config import (MODELS, NETWORKS, SAME_SLICES, SCHEDULES, config, layer_sizes,
                        layer_times, scaled)
from .turns import interval_text, paired, round_ratios, turns


def schedule_table(models=tuple(MODELS), networks=NETWORKS, schedules=SCHEDULES,
                   workers=(2, 4), rounds: int = 5, block: int = 3,
                   batch_per_rank: int | None = None, device: str = "cpu",
                   link: str = "model", profiles: dict | None = None,
                   turns_ms: dict | None = None, how: str = "rotate") -> list[dict]:
    """Every schedule, model, rank count and link, measured in turns (:func:`~lab.bench.turns.turns`: a slow
    phase of a shared machine hits every schedule alike): the step time (see :func:`~lab.bench.turns.turns`),
    the step time predicted (:func:`lab.schedule.plan.predict`) from per-layer times measured
    on as many ranks and scaled to ``sync``'s compute in this session (:func:`scaled`), both
    speedups over ``sync`` and over ``fifo`` (the median of the per-round ratios, :func:`~lab.bench.turns.paired`,
    with their interquartile range), their ratio to the prediction, the ceiling any
    overlap can reach (``bound``: (C + T) / max(C, T), with T the link's modeled time for
    ``sync``'s allreduce and C sync's compute), each schedule's compute (its step less its
    waits) against sync's, the final loss's distance from ``sync``'s, and the largest
    final-parameter difference from ``sync`` and from the schedule with the same slices
    (:data:`SAME_SLICES`: 0 with two ranks; with more, gloo sums in an order that depends on how
    the vector it reduces is cut, 1e-5 after a few steps).

    ``batch_per_rank``: the global batch is ``batch_per_rank * ranks`` (weak scaling) instead of
    the book's fixed 256. ``device``: where the ranks compute. ``link="kernel"``: the ranks sit
    on a kernel link (:mod:`lab.comm.kernel`) reshaped to each network in its turn.
    ``profiles``: a dict that receives, per ``(model, ranks)``, the layer sizes and the scaled
    per-layer times the predictions used (to predict other links). ``turns_ms``: a dict that
    receives, per ``(model, ranks, network, schedule)``, the mean steady step of each round's
    turn (:func:`~lab.bench.turns.turns`), in round order, so that a ratio can be taken round by round."""
    from ..comm import Network
    rows = []
    for w in workers:
        batch = {} if batch_per_rank is None else {"batch_size": batch_per_rank * w}
        for model in models:
            timeline = config(model, "fifo", None, 24, **batch).with_(schedule_kw={"timeline": True})
            profile = layer_times(train_many([timeline], w, progress=False, device=device)[0])
            sizes = layer_sizes(model)
            cfgs = [config(model, s, n, rounds * block, link=link, **batch)
                    for n in networks for s in schedules]
            keys = [(c.network, c.schedule) for c in cfgs]
            ref = [keys.index((c.network, SAME_SLICES.get(c.schedule, c.schedule)))
                   if (c.network, SAME_SLICES.get(c.schedule)) in keys else i
                   for i, c in enumerate(cfgs)]
            got = dict(zip(keys, turns(cfgs, w, rounds, block, timeout=300 + 30 * len(cfgs),
                                       ref=ref, device=device, link=link, how=how)))
            c_sync = float(np.median([got[n, "sync"]["compute_ms"] for n in networks])) / 1e3
            fwd, ready = scaled(profile, c_sync)
            if profiles is not None:
                profiles[model, w] = (sizes, fwd, ready)
            if turns_ms is not None:
                turns_ms.update({(model, w, *k): list(v["turns_ms"]) for k, v in got.items()})
            for n in networks:
                pred = {s: 1e3 * plan.predict(sizes, fwd, ready, s, n, w) for s in schedules}
                base, loss = got[n, "sync"]["ms"], got[n, "sync"]["loss"][-1]
                fifo = got.get((n, "fifo"), {}).get("ms")
                t = 1e3 * Network.parse(n).time("allreduce", 4 * sum(sizes), w)
                for s in schedules:
                    ms, psp = got[n, s]["ms"], pred["sync"] / pred[s]
                    sp, sp_lo, sp_hi = paired(got[n, "sync"], got[n, s])
                    xf = paired(got[n, "fifo"], got[n, s]) if fifo else (None,) * 3
                    sp95 = interval_text(round_ratios(got[n, "sync"], got[n, s]))
                    xf95 = interval_text(round_ratios(got[n, "fifo"], got[n, s])) if fifo else None
                    ceiling = (1e3 * c_sync + t) / max(1e3 * c_sync, t)
                    rows.append({
                        "model": model, "ranks": w, "device": device, "batch": cfgs[0].batch_size,
                        "link": n, "link kind": link, "schedule": s,
                        "ms/step": round(ms, 1), "predicted ms": round(pred[s], 1),
                        "speedup": round(sp, 3), "speedup IQR": f"{sp_lo:.2f}-{sp_hi:.2f}",
                        "speedup 95%": sp95,
                        "predicted speedup": round(psp, 3),
                        "x fifo": round(xf[0], 3) if fifo else None,
                        "x fifo IQR": f"{xf[1]:.2f}-{xf[2]:.2f}" if fifo else None,
                        "x fifo 95%": xf95,
                        "x fifo ratios": ([round(x, 4) for x in round_ratios(got[n, "fifo"], got[n, s])]
                                          if fifo else None),
                        "predicted x fifo": round(pred["fifo"] / pred[s], 3) if fifo else None,
                        "measured/predicted": round(sp / psp, 3),
                        "bound": round(ceiling, 3),
                        # no overlap of C and T can beat (C + T) / max(C, T): above it, the
                        # baseline is broken (or the machine's load changed under it)
                        "above bound": bool(sp > ceiling),
                        "compute x sync": round(got[n, s]["compute_ms"] / (1e3 * c_sync), 3),
                        "spread": round(got[n, s]["spread"], 3),
                        "bytes/step": got[n, s]["bytes"] // (rounds * block),
                        "loss - sync": float(f"{got[n, s]['loss'][-1] - loss:.2g}"),
                        "param diff": float(f"{got[n, s]['param_diff']:.2g}"),
                        "diff, same slices": float(f"{got[n, s]['ref_diff']:.2g}")})
    return stamp(rows, lambda r: link_of(r["link"], kernel=link == "kernel"),
                 clock={"ms/step": "wall", "predicted ms": "modeled"}, bytes={"bytes/step": "handed over"})


def aa_control(model: str = "vgg", network: str = "1Gbps,0.1ms", workers: int = 2,
               rounds: int = 25, block: int = 4, schedule: str = "fifo", link: str = "model",
               how: str = "rotate") -> dict:
    """The A/A control of the turns bench: one schedule run as two identical configs in turns,
    which must measure 1.00 within its interval; a systematic departure is a penalty of the
    bench (the order of turns, a switch between runs), which a p3/fifo ratio would carry.
    Returns the per-round ratios (first copy's turn over the second's), their median and
    95% interval, and whether the interval contains 1 and lies within 1 +- 0.05."""
    from ..rules import median_interval
    cfg = config(model, schedule, network, rounds * block)
    a, b = turns([cfg, cfg], workers, rounds, block, timeout=300 + 10 * rounds, link=link, how=how)
    r = round_ratios(a, b)
    med, lo, hi = median_interval(r)
    return stamp([{"model": model, "link": network, "ranks": workers, "schedule": schedule,
                   "rounds": rounds, "order": how, "ratio": round(med, 4), "95% low": round(lo, 4),
                   "95% high": round(hi, 4), "contains 1": bool(lo <= 1 <= hi),
                   "within 0.05": bool(lo >= 0.95 and hi <= 1.05), "ratios": [round(x, 4) for x in r],
                   "ms/step": round(a["ms"], 2)}],
                 link_of(network, kernel=link == "kernel"), clock={"ms/step": "wall"})[0]
