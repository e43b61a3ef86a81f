"""The authors' changing network, as a ``network_schedule`` for any model size and run length.

Tyagi & Swany, BigData 2023, Sec. V, vary the link from epoch to epoch; their code
(``initialize_latency_bandwidth`` in ``flexible_compression/miscellaneous/helper.py``,
sahiltyagi4/ARTopk) has twelve phases of 8 epochs (ResNet-50; 4 for the others), latency in ms
and bandwidth in Gb/s: down from 1 ms / 25 Gb/s to 32 ms / 1 Gb/s and back up. The sixth and
seventh phases are the same link, so a run sees eleven links and ten changes.

A book-sized run shortens each phase to a few steps and rescales the links so the exchange of
a model of ``n`` parameters costs what ResNet-50's (25,557,032, their ``m``) did, in proportion:
the latency is multiplied by ``time_scale`` and the bandwidth by ``n / 25,557,032 /
time_scale``, so both terms of every alpha-beta time shrink by ``time_scale`` and their ratio,
which decides the collective and the density, is the authors'.
"""
from __future__ import annotations

#: (latency ms, bandwidth Gb/s) of the authors' twelve phases
AUTHORS_PHASES = ((1, 25), (2, 20), (4, 15), (8, 10), (16, 5), (32, 1),
                  (32, 1), (16, 5), (8, 10), (4, 15), (2, 20), (1, 25))
#: parameters of the model their schedule was priced for (ResNet-50, ``m`` in their code)
RESNET50_PARAMS = 25_557_032


def authors_schedule(steps_per_phase: int, n: int = RESNET50_PARAMS,
                     time_scale: float = 1.0) -> str:
    """The twelve phases as a ``network_schedule`` string, ``steps_per_phase`` steps each,
    rescaled for a model of ``n`` parameters and a ``time_scale`` (module docstring)."""
    if isinstance(steps_per_phase, bool) or not isinstance(steps_per_phase, int) \
            or steps_per_phase < 1:
        raise ValueError(f"steps_per_phase must be a positive int, got {steps_per_phase!r}")
    if not n >= 1 or not time_scale > 0:
        raise ValueError(f"n must be >= 1 and time_scale > 0, got {n!r}, {time_scale!r}")
    size = n / RESNET50_PARAMS / time_scale
    return " ".join(f"{bw * 1e3 * size:.6g}Mbps,{ms * time_scale:.6g}ms:{steps_per_phase}"
                    for ms, bw in AUTHORS_PHASES)


__all__ = ["AUTHORS_PHASES", "RESNET50_PARAMS", "authors_schedule"]
