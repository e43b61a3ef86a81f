"""What this machine adds to every method's step, pooled over the profiled methods.

Two parts of a :class:`~lab.advise.StepProfile` belong to the machine and the model,
not to the method:

- **forward + backward.** Every method that exchanges after backward (all but P3, whose hooks
  and thread add to it, and the parameter server, whose workers compute a part of the batch)
  runs the same model on the same batch, so its compute is one number: the median over those
  methods' profiles.
- **a collective on loopback.** With no emulated link, a collective on ``p`` ranks that share
  a CPU's cores costs about the same per *round* whatever it carries: a round waits until every
  rank's thread has been scheduled, while the bytes of these models (at most hundreds of kB)
  move through memory in a fraction of that. The rounds are the cost model's own
  (:func:`rounds`: a ring allreduce has ``2(p - 1)``, an allgather ``p - 1``), and the cost
  per round of each collective is the median over the methods that use only that one.

One method's 16-step profile measures both with the noise of ranks that share two cores (at 8
ranks the same forward and backward measured 0.9 to 3.2 ms across methods); the pooled numbers
replace them, so the differences left between methods are the ones that belong to them: codec
time, bytes, calls.
"""
from __future__ import annotations

import statistics
from dataclasses import replace

from ..comm.cost import AlphaBeta
from .methods import METHODS
from .profile import StepProfile

_ROUNDS = AlphaBeta(1.0, 0.0)   # unit latency, free bytes: a collective's time is its rounds


def rounds(op: str, p: int) -> float:
    """Sequential messages (latency terms) of one ``op`` on ``p`` ranks, by the cost model."""
    return _ROUNDS.time(op, 0.0, p)


def plain(method: str) -> bool:
    """Whether ``method`` exchanges after backward among peers (no overlap, no server)."""
    o = METHODS[method].overrides if method in METHODS else {}
    return o.get("schedule", "sync") == "sync" and o.get("sync", "allreduce") == "allreduce"


def per_round(profiles: dict[str, StepProfile]) -> dict[str, float]:
    """``{op: seconds per round}`` on loopback: for each collective, the median over the plain
    methods whose traffic is that one op alone (one per step or more) of their measured
    loopback communication per round."""
    got: dict[str, list[float]] = {}
    for name, prof in profiles.items():
        ops = [op for op, (calls, _) in prof.traffic.items() if calls > 0]
        if plain(name) and len(ops) == 1 and prof.traffic[ops[0]][0] >= 0.5:
            n = prof.traffic[ops[0]][0] * rounds(ops[0], prof.world)
            if n > 0:
                got.setdefault(ops[0], []).append(prof.comm_s / n)
    return {op: statistics.median(v) for op, v in got.items()}


def pooled(profiles: dict[str, StepProfile]) -> dict[str, StepProfile]:
    """``profiles`` (one world size) with the plain methods' compute replaced by their median
    and their loopback communication by their rounds priced at :func:`per_round`'s cost (an op
    no single-op method measured is priced at the median of the others). Other methods, and
    every profile when fewer than two plain ones are given, are returned as they are."""
    mine = {k: v for k, v in profiles.items() if plain(k)}
    if len(mine) < 2 or len({v.world for v in profiles.values()}) != 1:
        return dict(profiles)
    compute = statistics.median(v.compute_s for v in mine.values())
    cost = per_round(mine)
    fallback = statistics.median(cost.values()) if cost else None
    out = {}
    for name, prof in profiles.items():
        if name not in mine:
            out[name] = prof
            continue
        floor = prof.comm_s
        if fallback is not None:
            floor = sum(calls * rounds(op, prof.world) * cost.get(op, fallback)
                        for op, (calls, _) in prof.traffic.items())
        out[name] = replace(prof, compute_s=compute, comm_s=floor)
    return out
