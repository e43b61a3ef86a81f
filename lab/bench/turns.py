"""Schedules measured *in turns* on the same ranks (Part 7's bench, :mod:`lab.bench.p3`): a
few steps of each config, round after round, so that a slow phase of a shared machine hits
every config of a round alike; the order of the rounds, the per-round ratios and their
interval, and the head lag read from a timeline run's events."""
from __future__ import annotations

import time

import numpy as np
import torch

from ..runtime import launch


def paired(base: dict, other: dict) -> tuple[float, float, float]:
    """``base``'s time over ``other``'s, round by round (the two ran one after the other in each
    round, so a slow phase of the machine hits both): the median and the interquartile range
    of the per-round ratios."""
    q1, med, q3 = np.percentile(round_ratios(base, other), [25, 50, 75])
    return float(med), float(q1), float(q3)


def interval_text(ratios) -> str | None:
    """The 95% interval of the median of per-round ``ratios`` (:func:`lab.rules.median_interval`),
    as ``"low-high"``; None with fewer than 6 rounds (too few for a 95% interval)."""
    from ..rules import median_interval
    if len(ratios) < 6:
        return None
    _, lo, hi = median_interval(list(ratios))
    return f"{lo:.3f}-{hi:.3f}"


def round_ratios(base: dict, other: dict) -> list[float]:
    """``base``'s turn over ``other``'s, round by round (:func:`turns` results)."""
    return (np.asarray(base["turns_ms"]) / np.asarray(other["turns_ms"])).tolist()


def order(r: int, n: int, how: str = "rotate") -> list[int]:
    """The order of ``n`` configs in round ``r``. ``"rotate"``: shifted by one each round, so
    that each config is first, second, ... equally often and every turn follows another config
    (a turn pays the same switch from the one before: with two configs, the same order every
    round); ``"reverse"``: odd rounds reversed (the older order, under which the config that
    ends a round also starts the next, and a turn that follows itself pays no switch)."""
    if how == "reverse":
        return list(range(n))[::-1] if r % 2 else list(range(n))
    if how != "rotate":
        raise ValueError(f"order: how must be 'rotate' or 'reverse', got {how!r}")
    shift = 0 if n <= 2 else r % n
    return [(i + shift) % n for i in range(n)]


def _turns_rank(ctx, cfgs, rounds: int, block: int, how: str = "rotate"):
    from .. import schedule
    from ..comm import Collective, CommLedger
    from ..train.loop import engine
    runs = []
    for cfg in cfgs:
        comm = Collective(ledger=CommLedger(), network=cfg.network_at(0))
        e = engine(ctx, cfg, comm)
        runs.append((cfg, comm, e, schedule.make(cfg.schedule, e, **cfg.schedule_kw), [], [], [], []))
    try:
        for r in range(rounds):
            for cfg, comm, e, s, times, computes, losses, events in (runs[i] for i in order(r, len(runs), how)):
                comm.network = cfg.network_at(0)   # a kernel link: the NIC shaped to this run's rate
                for k in range(block):
                    step = r * block + k
                    comm.ledger.step = step
                    x, y = e.data.batch(step, cfg.batch_size, ctx.rank, ctx.world_size, cfg.seed)
                    x, y = x.to(ctx.device), y.to(ctx.device)
                    t0 = time.perf_counter()
                    res = s.step(step, x, y)
                    times.append(time.perf_counter() - t0)
                    computes.append(res.compute_s)
                    losses.append(res.loss)
                    if "events" in res.info:
                        events.append(res.info["events"])
                if hasattr(s, "drain"):   # its exchange must not run into the next schedule's turn
                    s.drain()
    finally:
        for run in runs:
            run[3].close()
    return [{"step_s": times, "compute_s": computes, "loss": losses, "lags": head_lags(events),
             "bytes": sum(r.bytes for r in comm.ledger.records if r.tag != "plan"),
             "params": torch.cat([p.detach().reshape(-1) for p in e.params])}
            for _, comm, e, _, times, computes, losses, events in runs]


def turns(cfgs, workers: int, rounds: int = 5, block: int = 3, timeout: float = 600,
          ref=None, device: str = "cpu", link: str = "model", how: str = "rotate") -> list[dict]:
    """Run ``cfgs`` on the same ``workers`` ranks *in turns*: ``block`` steps of each, round
    after round, so a slow phase of a shared machine hits every schedule alike (the way
    ``ddp_hook`` times two hooks; the order of each round is :func:`order`'s ``how``). Per config: ``ms``, the median over rounds of each turn's
    mean steady step (the first step of each turn is left out: it starts with nothing in flight;
    a turn's mean, not single steps, because an overlapping schedule's step can borrow time
    from the step before it); ``turns_ms``, those turns; ``spread``, their interquartile range
    over ``ms``;
    ``median_ms`` over all steady steps; ``compute_ms``, the median steady step less its waits;
    every step's seconds, the losses, the training bytes rank 0 sent (not the overlap engine's
    one-off plan exchange), and the largest difference of its final parameters from the first
    config's over all ranks (``param_diff``; ``ref_diff``: from config ``ref[i]``'s, by default
    the first's too). Every config needs ``steps = rounds * block``. ``link="kernel"``: on a
    kernel link shaped to the first config's network, reshaped at each turn."""
    if isinstance(block, bool) or not isinstance(block, int) or block < 2:
        raise ValueError(f"turns: block must be an int >= 2 (steps per turn), got {block!r}")
    for c in cfgs:
        c.check_workers(workers)
        if c.steps != rounds * block:
            raise ValueError(f"turns: each config needs steps = rounds * block = {rounds * block}, "
                             f"got {c.steps} ({c.name})")
    kw = {"link": "kernel", "network": cfgs[0].network_at(0)} if link == "kernel" else {}
    order(0, len(cfgs), how)   # refuse a bad order before launching
    res = launch(_turns_rank, workers, list(cfgs), rounds, block, how, timeout=timeout, device=device,
                 **kw)
    out = []
    for i in range(len(cfgs)):
        r0 = res[0][i]
        keep = [j for j in range(len(r0["step_s"])) if j % block]
        steady = [r0["step_s"][j] for j in keep]
        turn = [float(np.mean(steady[k:k + block - 1])) for k in range(0, len(steady), block - 1)]
        q1, q3 = np.percentile(turn, [25, 75])
        diff = max(float((r[i]["params"] - r[0]["params"]).abs().max()) for r in res)
        j = 0 if ref is None else ref[i]
        same = max(float((r[i]["params"] - r[j]["params"]).abs().max()) for r in res)
        out.append({"ms": 1e3 * float(np.median(turn)), "spread": float((q3 - q1) / np.median(turn)),
                    "turns_ms": [1e3 * t for t in turn],
                    "median_ms": 1e3 * float(np.median(steady)),
                    "compute_ms": 1e3 * float(np.median([r0["compute_s"][j] for j in keep])),
                    "step_s": r0["step_s"], "compute_s": r0["compute_s"], "lags": r0["lags"],
                    "loss": r0["loss"], "bytes": r0["bytes"], "param_diff": diff, "ref_diff": same})
    return out


def head_lags(events, warmup: int = 2) -> list[float]:
    """Seconds from the last rank's end of backward (every rank's gradient ready) to layer 0's
    new parameters being there, per exchange of a ``timeline=True`` run on an emulated link;
    ``events``: the steps' event lists (``History.series["events"]``)."""
    evs = [e for ev in events for e in ev]
    last = [e[1] for e in evs if e[0] == "last"]
    first = [e[2] for e in evs if e[0] == "applied" and e[1] == 0]
    return [a - b for b, a in zip(last, first)][warmup:]
