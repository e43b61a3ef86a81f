"""GPipe (Huang et al., NeurIPS 2019, Sec. 2.2 and Fig. 2c): each step, every stage runs
the forward passes of all ``m`` micro-batches, then all backward passes, then one
synchronous update with the summed gradients (the "flush").

With ``p`` stages of equal cost, the first stage waits ``p - 1`` micro-batch times before its
first backward and the last stage waits as long before its first forward, so a fraction

    bubble = (p - 1) / (m + p - 1)

of each step is idle (GPipe Sec. 2.2). Actions are ``("F", k)``, ``("B", k)`` for the global
micro-batch ``k = step * m + i``, and ``("U", step)`` for the optimizer step.
"""
from __future__ import annotations


def gpipe(stage: int, stages: int, microbatches: int, steps: int) -> list[tuple[str, int]]:
    out = []
    for t in range(steps):
        ks = range(t * microbatches, (t + 1) * microbatches)
        out += [("F", k) for k in ks] + [("B", k) for k in ks] + [("U", t)]
    return out


def bubble_fraction(stages: int, microbatches: int) -> float:
    """GPipe's idle fraction (p - 1) / (m + p - 1) for equal-cost stages."""
    return (stages - 1) / (microbatches + stages - 1)
