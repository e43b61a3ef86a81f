"""Which collective exchanges a Top-k gradient fastest (Tyagi & Swany, BigData 2023, Sec. III-B).

``k`` kept entries, 4-byte values and 4-byte indices, ``p`` ranks; three ways to exchange them:
``ring`` (broadcast the leader's indices + ring allreduce of the values), ``tree`` (the same
broadcast + a tree allreduce) and ``allgather`` (every rank's own values and indices, 8k bytes).
Three cost models (``model=``), all alpha-beta (seconds per message, seconds per byte):

- ``"authors"`` (default): the formulas of the authors' code, ``getLatencyBWCommTime`` in
  ``flexible_compression/adaptive_moo/run_MOOCompression.py`` (sahiltyagi4/ARTopk), with
  ``L = log2 p`` (not rounded): index broadcast ``L a + L 4k b``; ring allreduce
  ``2(p-1) a + 2(p-1)/p 4k b``; tree allreduce ``2L a + 2L 4k b``; allgather
  ``L a + (p-1) 8k b``.
- ``"cheapest"``: each collective at its cheapest standard algorithm (Thakur, Rabenseifner &
  Gropp, IJHPCA 2005): binomial broadcast; ``tree`` = the cheaper of recursive doubling and
  reduce + broadcast; allgather = the cheaper of ring and recursive doubling.
- ``"lab"``: what the emulated link (:mod:`lab.comm.network`) sleeps by: binomial broadcast,
  recursive-doubling ``tree``, *ring* allgather ``(p-1)(a + 8k b)``.

VAR-Topk adds one allgather of a 4-byte norm to both AR options (the authors' MOO code runs
STAR only; we price the norm with each model's allgather). The switch takes the cheapest; ties go
to the first in ``COLLECTIVES`` order, so the choice is deterministic.
"""
from __future__ import annotations

import math

from ..comm import cost

#: The ways to exchange a Top-k gradient that :func:`~lab.adaptive.exchange_costs` prices.
COLLECTIVES = ("ring", "tree", "allgather")
#: The cost models :func:`~lab.adaptive.exchange_costs` knows (first: the default).
COST_MODELS = ("authors", "cheapest", "lab")
VALUE_BYTES = INDEX_BYTES = NORM_BYTES = 4


def _authors(k, p, a, b):
    lg = math.log2(p)
    return {"bcast": lg * a + lg * INDEX_BYTES * k * b,
            "ring": 2 * (p - 1) * a + 2 * (p - 1) / p * VALUE_BYTES * k * b,
            "tree": 2 * lg * a + 2 * lg * VALUE_BYTES * k * b,
            "allgather": lambda m: lg * a + (p - 1) * m * b}


def _cheapest(k, p, a, b):
    return {"bcast": cost.broadcast_tree(INDEX_BYTES * k, p, a, b),
            "ring": cost.allreduce_ring(VALUE_BYTES * k, p, a, b),
            "tree": min(cost.allreduce_tree(VALUE_BYTES * k, p, a, b),
                        cost.allreduce_reduce_broadcast(VALUE_BYTES * k, p, a, b)),
            "allgather": lambda m: min(cost.allgather_ring(m, p, a, b),
                                       cost.allgather_recursive_doubling(m, p, a, b))}


def _lab(k, p, a, b):
    return {"bcast": cost.broadcast_tree(INDEX_BYTES * k, p, a, b),
            "ring": cost.allreduce_ring(VALUE_BYTES * k, p, a, b),
            "tree": cost.allreduce_tree(VALUE_BYTES * k, p, a, b),
            "allgather": lambda m: cost.allgather_ring(m, p, a, b)}


_MODELS = {"authors": _authors, "cheapest": _cheapest, "lab": _lab}


def exchange_costs(k: int, p: int, alpha: float, beta: float, variant: str = "star",
                   model: str = "authors") -> dict:
    """Modeled seconds of each option in ``COLLECTIVES`` for one step."""
    if variant not in ("star", "var"):
        raise ValueError(f"variant must be 'star' or 'var', got {variant!r}")
    if model not in _MODELS:
        raise ValueError(f"model must be one of {COST_MODELS}, got {model!r}")
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if p < 1:
        raise ValueError(f"p (world size) must be >= 1, got {p}")
    if p == 1:
        return dict.fromkeys(COLLECTIVES, 0.0)
    parts = _MODELS[model](k, p, alpha, beta)
    bcast = parts["bcast"]
    if variant == "var":
        bcast += parts["allgather"](NORM_BYTES)
    return {"ring": bcast + parts["ring"], "tree": bcast + parts["tree"],
            "allgather": parts["allgather"]((VALUE_BYTES + INDEX_BYTES) * k)}


def choose(costs: dict) -> str:
    """The cheapest collective (first in ``COLLECTIVES`` order on ties)."""
    return min(COLLECTIVES, key=lambda c: (costs[c], COLLECTIVES.index(c)))
