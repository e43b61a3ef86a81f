"""Calibration: the only measurements the simulator is fitted on.

- the kernel links' efficiency per collective (``bench links``, :func:`lab.sim.network.kernel_efficiency`);
- codec seconds per value, one process on one core (:func:`lab.advise.codec_speed.per_value`,
  the advisor's codec timer; ``bench codecs`` times the same codecs the same way);
- one compute profile per model and world size: a short fp32 run with no link (loopback), whose
  forward + backward per rank is the compute, and whose loopback collective time per round is
  the floor a step's communication never goes below on this machine (ranks sharing its cores:
  the advisor's machine share, :mod:`lab.advise.machine`). No training run on a shaped link
  enters the calibration.
"""
from __future__ import annotations

import statistics


def compute_profile(model: str, world: int, steps: int = 12, per_rank: int = 8) -> dict:
    """``{"compute_s", "floor_per_round_s", "exchange_s", "shapes"}`` of ``model`` on
    ``world`` local ranks of ``per_rank`` samples each, fp32 allreduce, no link: medians over
    the steps after the first. ``exchange_s`` is the exchange's time off the wire (what the
    History books as fp32's codec time: flattening, copying back, bookkeeping)."""
    from ..advise.machine import rounds
    from ..advise.methods import base_config
    from ..train import train
    cfg = base_config(model, steps=steps).with_(lr=0.05, momentum=0.9, batch_size=per_rank * world)
    h = train(cfg, world)
    tail = slice(1, None)
    calls = max(1, sum(c for c, _ in h.series["traffic"][-1].values()))
    per_round = statistics.median(h.comm_s[tail]) / (calls * rounds("allreduce", world))
    return {"compute_s": statistics.median(h.compute_s[tail]), "floor_per_round_s": per_round,
            "exchange_s": statistics.median(h.codec_s[tail]), "shapes": shapes(model)}


def shapes(model: str) -> list:
    """Parameter shapes of ``model`` as the advisor's runs build it (forward order)."""
    from ..advise.methods import base_config
    from ..data import load
    from ..models import make
    b = base_config(model)
    net = make(b.model, load(b.data, seed=b.seed, **b.data_kw), seed=b.seed, **b.model_kw)
    return [list(p.shape) for p in net.parameters()]


def codec_per_value(technique: str, model: str, world: int) -> tuple[float, float]:
    """(codec seconds per value, server seconds per value) of ``technique`` on ``world`` ranks."""
    from ..advise.codec_speed import per_value
    from ..advise.methods import Method
    from .validate import overrides
    m = Method(technique, "", overrides(technique))
    n = sum(_numel(s) for s in shapes(model))
    codec, server, _ = per_value([m], model, world, n)
    return codec[technique], server


def _numel(s) -> int:
    out = 1
    for d in s:
        out *= d
    return out
