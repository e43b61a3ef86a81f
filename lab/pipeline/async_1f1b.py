"""Asynchronous 1F1B without flush (PipeDream; Narayanan et al., SOSP 2019, Sec. 3.3): the
micro-batches stream through the pipeline and every stage updates its weights as soon as a
backward pass has produced a gradient, so no stage ever waits for a flush.

The price is staleness. In the steady state stage ``s`` of ``p`` has ``p - s`` micro-batches
in flight, so between the forward pass of micro-batch ``k`` and its backward pass the stage
applies ``p - 1 - s`` updates (fewer at the start):

    tau_s(k) = min(k, p - 1 - s)                                   (staleness of stage s)

the delay that grows with the number of stages after ``s`` (AsyncPP, Ajanthan et al., ICML
2025, Sec. 3; AsyncMesh, arXiv 2601.22442, Sec. 3). What the backward pass is evaluated at
(current weights, stashed weights, a look-ahead) is the stage's business, not the schedule's.
"""
from __future__ import annotations

from .onef1b import warm_steady_drain


def async_1f1b(stage: int, stages: int, microbatches: int, steps: int) -> list[tuple[str, int]]:
    return warm_steady_drain(stage, stages, range(steps * microbatches), update=True)


def staleness(stage: int, stages: int, k: int) -> int:
    """Updates applied on ``stage`` between micro-batch ``k``'s forward and backward passes."""
    return min(k, stages - 1 - stage)
