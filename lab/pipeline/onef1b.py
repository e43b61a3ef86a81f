"""1F1B with a flush (PipeDream-Flush; Narayanan et al., ICML 2021 "Memory-efficient
pipeline-parallel DNN training", Sec. 3.1; the schedule of Megatron-LM).

Stage ``s`` of ``p`` first runs ``w = min(p - 1 - s, m)`` forward passes (warm-up), then
alternates one forward and one backward, then drains the ``w`` backward passes left, then
updates. The gradients and the bubble are those of GPipe, but at most ``w + 1`` micro-batches
are in flight on a stage instead of ``m``: activation memory is bounded by the depth of the
pipeline, not by the number of micro-batches.
"""
from __future__ import annotations


def one_f_one_b(stage: int, stages: int, microbatches: int, steps: int) -> list[tuple[str, int]]:
    out = []
    for t in range(steps):
        out += warm_steady_drain(stage, stages, range(t * microbatches, (t + 1) * microbatches))
        out.append(("U", t))
    return out


def warm_steady_drain(stage: int, stages: int, ks, update: bool = False) -> list[tuple[str, int]]:
    """The 1F1B order over micro-batches ``ks``; with ``update`` an ``("U", k)`` follows each
    backward (the asynchronous schedule, which never flushes)."""
    ks = list(ks)
    warm = min(stages - 1 - stage, len(ks))
    out = [("F", k) for k in ks[:warm]]
    for i, k in enumerate(ks[warm:]):
        out += [("F", k), ("B", ks[i])] + ([("U", ks[i])] if update else [])
    for k in ks[len(ks) - warm:]:
        out += [("B", k)] + ([("U", k)] if update else [])
    return out
