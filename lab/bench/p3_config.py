"""What Part 7's bench runs, and the per-layer view its predictions start from.

The schedules, links and models of ``python -m lab bench p3`` (:mod:`lab.bench.p3`), the
config the benchmark and the book train with (:func:`config`), and each model's layers: their
sizes (:func:`layer_sizes`), their forward times and gradient-ready offsets from a
``timeline=True`` run (:func:`layer_times`), scaled to a baseline's compute (:func:`scaled`).
"""
from __future__ import annotations

import numpy as np

from ..train import TrainConfig

SCHEDULES = ("sync", "fifo", "slicing-only", "priority-only", "p3")
NETWORKS = ("100Mbps,0.1ms", "300Mbps,0.1ms", "600Mbps,0.1ms", "1Gbps,0.1ms", "1.5Gbps,0.1ms",
            "3Gbps,0.1ms")
#: the benchmark's models: name -> (lab.models name, model_kw)
MODELS = {"vgg": ("vgg", {"channels": 16, "fc": 512}),
          "vgg32": ("vgg", {"channels": 32, "fc": 512}),
          "resnet": ("resnet", {"channels": 32, "blocks": 2})}


def config(model: str, schedule: str, network, steps: int, batch_size: int = 256,
           **kw) -> TrainConfig:
    """The config the benchmark and the book use: digits, global batch 256, SGD with momentum;
    ``model`` is a key of :data:`MODELS` (or any model, with its defaults)."""
    sk = {"slice_size": kw.pop("slice_size")} if "slice_size" in kw else {}
    name, mkw = MODELS.get(model, (model, {}))
    return TrainConfig(model=name, data="digits", steps=steps, batch_size=batch_size, lr=0.05,
                       momentum=0.9, model_kw=dict(mkw), network=network,
                       schedule=schedule, schedule_kw=sk, eval_every=0, **kw)


def step_ms(h, warmup: int = 2) -> float:
    """Median measured step time (compute + exposed communication) after ``warmup`` steps."""
    return 1e3 * float(np.median(h.step_s[warmup:]))


def layer_sizes(model: str) -> list[int]:
    """Values per layer of the benchmark's ``model``, in traced forward order (the engine's)."""
    from .. import data as data_mod, models
    from ..schedule.overlap import traced_layers
    d = data_mod.load("digits")
    name, mkw = MODELS.get(model, (model, {}))
    layers, _ = traced_layers(models.make(name, d, **mkw), d.batch(0, 8, 0, 1)[0])
    return [sum(p.numel() for p in ps) for _, ps in layers]


#: Schedules that cut the same units and differ only in the order and timing they send them:
#: beside each, the one to compare its final parameters with.
SAME_SLICES = {"p3": "slicing-only", "priority-only": "fifo"}


def scaled(profile, compute_s: float):
    """Per-layer forward times and ready offsets scaled so that forward plus backward is
    ``compute_s`` (sync's own compute, measured in the same session): the prediction then
    starts from the baseline's compute, not from an overlapping run's."""
    fwd, ready = (np.asarray(v, dtype=float) for v in profile)
    k = compute_s / (fwd.sum() + ready.max())
    return fwd * k, ready * k


def layer_times(h, warmup: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Per-layer forward seconds and gradient-ready offsets (seconds after backward starts) of a
    ``timeline=True`` run: medians over the recorded steps after ``warmup``."""
    cs, rs = [], []
    for ev in h.series["events"][warmup:]:
        fwd = {e[1]: e[-1] for e in ev if e[0] == "fwd"}
        t_b = next(e[-1] for e in ev if e[0] == "backward")
        ready = {e[1]: e[-1] - t_b for e in ev if e[0] == "ready"}
        n = len(fwd)
        cs.append([fwd[i + 1] - fwd[i] for i in range(n - 1)] + [t_b - fwd[n - 1]])
        rs.append([ready[i] for i in range(n)])
    return np.median(cs, axis=0), np.median(rs, axis=0)
