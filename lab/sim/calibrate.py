"""Calibration: the only measurements the simulator is fitted on.

- the kernel links' efficiency per collective (``bench links``, :func:`lab.sim.network.kernel_efficiency`);
- codec seconds per value, one process on one core (:func:`lab.advise.codec_speed.per_value`,
  the advisor's codec timer; ``bench codecs`` times the same codecs the same way);
- one compute profile per model and world size: a short fp32 run with no link (loopback), whose
  forward + backward per rank is the compute, and whose loopback collective time per round is
  the floor a step's communication never goes below on this machine (ranks sharing its cores:
  the advisor's machine share, :mod:`lab.advise.machine`). No training run on a shaped link
  enters the calibration. The third model's calibration repeats each profile in rounds that
  bracket the measurements (:func:`combine`: the median of each quantity, with its spread);
- for the fourth model, an allgather's loopback floor per call (:func:`allgather_floor`): the
  same short loopback run with signSGD's fixed-size payload allgathered in place of fp32's
  allreduce (a reference codec, none of the drawn techniques).
"""
from __future__ import annotations

import statistics


def compute_profile(model: str, world: int, steps: int = 12, per_rank: int = 8) -> dict:
    """``{"compute_s", "floor_per_round_s", "exchange_s", "shapes"}`` of ``model`` on
    ``world`` local ranks of ``per_rank`` samples each, fp32 allreduce, no link: medians over
    the steps after the first; the same with ``_mean_s`` in place of ``_s``: their means (a
    measured step is a mean, and ranks sharing cores make a few steps slow, so the third
    model prices means). ``exchange_s`` is the exchange's time off the wire (what the
    History books as fp32's codec time: flattening, copying back, bookkeeping)."""
    from ..advise.machine import rounds
    from ..advise.methods import base_config
    from ..train import train
    cfg = base_config(model, steps=steps).with_(lr=0.05, momentum=0.9, batch_size=per_rank * world)
    h = train(cfg, world)
    tail = slice(1, None)
    calls = max(1, sum(c for c, _ in h.series["traffic"][-1].values()))
    per_round = calls * rounds("allreduce", world)
    out = {"shapes": shapes(model)}
    for stat, suffix in ((statistics.median, "_s"), (statistics.mean, "_mean_s")):
        out["compute" + suffix] = stat(h.compute_s[tail])
        out["floor_per_round" + suffix] = stat(h.comm_s[tail]) / per_round
        out["exchange" + suffix] = stat(h.codec_s[tail])
    return out


def allgather_floor(model: str, world: int, steps: int = 12, per_rank: int = 8) -> dict:
    """``{"allgather_call_s", "allgather_call_mean_s"}``: the loopback communication per
    allgather call (median and mean over the steps after the first) of ``model`` on ``world``
    local ranks, trained with signSGD's 1-bit payload (Bernstein et al., ICML 2018), which is
    allgathered with no size exchange. On cores shared by more ranks than they hold, a call
    on loopback costs more than ``p - 1`` of the fp32 allreduce's ``2 (p - 1)`` rounds: a
    median 1.47x (1.17-1.65x) over the seed-55 campaign's calibration, so the floor is
    measured, not scaled."""
    from ..advise.methods import base_config
    from ..train import train
    cfg = base_config(model, steps=steps).with_(compressor="sign", lr=0.05, momentum=0.9,
                                                batch_size=per_rank * world)
    h = train(cfg, world)
    traffic = h.series["traffic"][-1]
    if "allgather" not in traffic:
        raise RuntimeError(f"the signSGD reference run made no allgather: {traffic}")
    calls = max(1, traffic["allgather"][0])
    return {"allgather_call_s": statistics.median(h.comm_s[1:]) / calls,
            "allgather_call_mean_s": statistics.mean(h.comm_s[1:]) / calls}


QUANTITIES = ("compute_s", "floor_per_round_s", "exchange_s",
              "compute_mean_s", "floor_per_round_mean_s", "exchange_mean_s")
#: measured only for the fourth model's calibration
OPTIONAL = ("allgather_call_s", "allgather_call_mean_s")


def combine(runs: list[dict]) -> dict:
    """One profile from repeated ones: each quantity's median over ``runs``, and ``spread``:
    each quantity's largest over its smallest value (1.0 for one run)."""
    if not runs:
        raise ValueError("runs must hold at least one profile, got none")
    have = QUANTITIES + tuple(q for q in OPTIONAL if all(q in r for r in runs))
    out = {q: statistics.median(r[q] for r in runs) for q in have}
    out["spread"] = {q: max(r[q] for r in runs) / max(min(r[q] for r in runs), 1e-12)
                     for q in have}
    out["runs"] = [{q: r[q] for q in have} for r in runs]
    return {**out, "shapes": runs[0]["shapes"]}


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
