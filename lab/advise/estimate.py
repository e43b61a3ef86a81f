"""Predicted time to a target quality: steps the method needs times what one step costs.

For a method, a link and a world size ``p``:

- **one step** is :func:`lab.sim.predict`'s, the book's one step-time model, on the profile
  (:func:`~lab.advise.estimate.sim_config`): compute + codec (both measured on this machine,
  :mod:`lab.advise.profile`) + communication, the ledger's per-step traffic priced by the
  alpha-beta model of the link (the formulas ``Network.time`` uses, the model the emulated
  link sleeps by), never less than the same collectives measured on loopback (the floor the
  emulation cannot go below); P3 and FIFO (``schedule``) are priced by Part 7's planner
  (:mod:`lab.sim.overlap`), layer by layer against the backward pass; the asynchronous
  parameter server's link carries its workers' pushes and pulls in series (:func:`ps_step_seconds`);
- **steps** = the method's convergence penalty (steps to the target relative to fp32
  allreduce, read off the accuracy curves that ``python -m lab bench grid`` measured and stored
  in ``convergence.json``, at the measured world size nearest ``p``) times fp32's steps.

The reasons come with the number: a reader sees whether a method wins on bytes, loses on codec
time or on extra steps.
"""
from __future__ import annotations

import functools
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from ..comm.network import BANDWIDTH_BITS, Network
from ..sim import Cluster, Config
from ..sim import predict as sim_predict
from .methods import METHODS
from .profile import StepProfile

CONVERGENCE = Path(__file__).with_name("convergence.json")


@dataclass(frozen=True)
class Prediction:
    """One method's predicted cost on one cluster, with its parts."""

    method: str
    family: str
    compute_s: float
    codec_s: float
    comm_s: float          # exposed communication per step (priced on the link)
    step_s: float
    penalty: float         # steps to target relative to fp32 (1.0 = as many; inf = never)
    steps: float           # predicted steps to the target
    time_s: float          # predicted seconds to the target
    reason: str
    machine: str = ""      # the CPU codec (and measured compute) times are from; "" unknown
    band: float | None = None   # lab.sim's worst step error on its family; None: not validated
    band_source: str = ""       # where the band comes from (lab.advise.validated.band_of)

    def as_dict(self) -> dict:
        return asdict(self)


def comm_seconds(profile: StepProfile, p: int, link: Network) -> float:
    """Alpha-beta seconds of one step's traffic on ``link`` with ``p`` ranks."""
    total = 0.0
    for op, (calls, nbytes) in profile.traffic.items():
        per_call = link.time(op, 0.0, p)
        total += calls * per_call + (link.time(op, nbytes, p) - per_call)
    return total


def ps_step_seconds(profile: StepProfile, p: int, link: Network) -> tuple[float, float]:
    """(step seconds, exposed seconds) of one step (``p - 1`` gradients) of the asynchronous
    parameter server (Li et al., OSDI 2014, sec. 3; ASP as Downpour SGD, Dean et al., NeurIPS
    2012), as :func:`lab.sim.predict` prices it. The server receives each push and sends each
    pull one after another, so its link carries the step's ``p - 1`` pushes and pulls in
    series: the price of the profile's traffic (``lab.sync.server.link_traffic``, scaled to
    ``p - 1`` workers) plus the server's updates is a lower bound that grows with the workers.
    A worker does not wait for the others, only for its own push, update and pull, so one
    gradient each is at least its compute plus its share ``1/(p-1)`` of that; the step is the
    larger bound, and never less than the step measured on loopback (at the profile's own
    world size). Exposed = the step minus a worker's compute."""
    if p - 1 < 1:
        raise ValueError(f"p must be >= 2 for a parameter server (rank 0 serves), got {p}")
    return step_seconds(profile, p, link)


def _served(method: str) -> bool:
    """Whether ``method`` runs on a parameter server (rank 0 serves, the others work)."""
    return METHODS[method].overrides.get("sync", "allreduce") != "allreduce"


def _technique(method: str) -> str:
    """The :mod:`lab.sim` technique whose schedule ``method`` runs (its bytes come from the
    profile's ledger, so only the schedule and the server matter)."""
    if _served(method):
        return "async-ps"
    return {"p3": "p3", "fifo": "fifo"}.get(METHODS[method].overrides.get("schedule"), "fp32")


@functools.lru_cache(maxsize=32)
def _layers(model: str, params: int) -> tuple:
    """The layer shapes of ``model`` as the advisor builds it, if it has ``params`` values
    (what an overlapping schedule's planner needs); else one layer of ``params`` values."""
    from ..sim.calibrate import shapes
    try:
        got = tuple(tuple(s) for s in shapes(model))
    except (KeyError, ValueError, TypeError):
        got = ()
    return got if sum(math.prod(s) for s in got) == params else ((params,),)


def sim_config(profile: StepProfile, p: int, link: Network | None) -> Config:
    """The :class:`lab.sim.Config` of ``profile`` priced with ``p`` ranks on ``link`` (None:
    loopback, no link): compute, codec and loopback time as measured, the ledger's traffic in
    place of the technique's formula, a flat cluster with the link's alpha and bandwidth."""
    tech = _technique(profile.method)
    shapes = _layers(profile.model, profile.params) if tech in ("p3", "fifo") else ((profile.params,),)
    n = max(1, profile.params)
    traffic = tuple((op, float(c), float(b) / c) for op, (c, b) in sorted(profile.traffic.items())
                    if c)
    if link is None:   # loopback: the link costs nothing beyond the measured floor
        cluster = Cluster(p, BANDWIDTH_BITS[1] / 8)
    else:
        cluster = Cluster(p, link.bandwidth, link.latency)
    if tech == "async-ps":   # serial server: the emulated link has one clock for both directions
        was = max(1, profile.world - 1)
        floor = profile.comm_s + profile.server_s if p - 1 == was else 0.0
        return Config(shapes, tech, cluster, profile.compute_s, traffic=traffic,
                      traffic_workers=was, floor_s=floor,
                      server_s_per_value=profile.server_s / was / n)
    return Config(shapes, tech, cluster, profile.compute_s, codec_s_per_value=profile.codec_s / n,
                  traffic=traffic, floor_s=profile.comm_s,
                  algorithm=link.algorithm if link is not None else "ring")


def step_seconds(profile: StepProfile, p: int, link: Network) -> tuple[float, float]:
    """(step seconds, exposed communication seconds) of one step: :func:`lab.sim.predict` on
    :func:`~lab.advise.estimate.sim_config`. The emulated link lets each collective run for real and then sleeps
    until its modeled time, so a step's communication is never less than what the same
    collectives took on loopback (``profile.comm_s``, which also holds the waits for ranks
    sharing the cores): the larger of the two is priced."""
    pred = sim_predict(sim_config(profile, p, link))
    return pred.step_s, pred.comm_s


def convergence(model: str, path=CONVERGENCE) -> dict:
    """``{"target": acc, "curves": {method: {world: [[step, acc], ...]}}, ...}`` measured for
    ``model`` by ``python -m lab bench grid`` (empty if it was not measured)."""
    if not path.exists():
        return {}
    return json.loads(path.read_text()).get(model, {})


def steps_to(curve, target: float) -> int | None:
    """First evaluated step at which accuracy reached ``target`` (None: never)."""
    return next((s for s, acc in curve if acc >= target), None)


def penalty(conv: dict, method: str, p: int, target: float | None = None
            ) -> tuple[float, float | None, str]:
    """(steps to ``target`` relative to fp32, fp32's steps, where that comes from), from the
    curves measured at the world size nearest ``p`` (on a log scale)."""
    curves = conv.get("curves", {})
    target = conv.get("target") if target is None else target
    if method not in curves or "fp32" not in curves or target is None:
        return 1.0, None, "convergence not measured: assumed equal to fp32"
    if not _same_settings(conv, method):
        return 1.0, None, "curves measured with other settings (rerun lab bench grid)"
    worlds = sorted(int(w) for w in curves[method] if w in curves["fp32"])
    if not worlds:
        return 1.0, None, "convergence not measured: assumed equal to fp32"
    w = min(worlds, key=lambda x: (abs(math.log(x / p)), x))
    mine, ref = steps_to(curves[method][str(w)], target), steps_to(curves["fp32"][str(w)], target)
    if ref is None:
        return 1.0, None, f"fp32 did not reach {target} at {w} ranks"
    if mine is None:
        return math.inf, ref, f"did not reach {target} in the measured run ({w} ranks)"
    how = "probed" if conv.get("probed") else "measured"
    return mine / ref, ref, f"{mine / ref:.2f}x fp32's steps to {target} ({how} at {w} ranks)"


def _same_settings(conv: dict, method: str) -> bool:
    """Whether the stored curves were measured with the method's current settings (a
    TrainConfig field added since they were, left at its default, changes nothing)."""
    stored = conv.get("settings", {}).get(method)
    if stored is None or "model" not in stored:
        return stored is None and "settings" not in conv   # hand-made data in tests
    from .methods import base_config
    from ..train import TrainConfig
    as_stored = lambda cfg: json.loads(json.dumps(cfg.to_dict(), default=str))  # noqa: E731
    now = as_stored(METHODS[method].config(base_config(stored["model"])))
    default = as_stored(TrainConfig())
    for k in set(now) | set(stored):
        if k in RUN_CONTROL:
            continue
        if k not in now:
            return False          # a setting that no longer exists
        if k not in stored:       # a field added since: the same runs if it is at its default
            if now[k] != default.get(k):
                return False
        elif now[k] != stored[k]:
            return False
    return True


#: TrainConfig fields that say how long a run goes or when it stops, not what it computes: the
#: curves of a run hold for any of their values (stop_on_divergence only stops a run that
#: diverged, and the advisor's runs do not).
RUN_CONTROL = ("steps", "eval_every", "stop_on_divergence")


def borrowed_penalty(method: str, p: int, path=CONVERGENCE, exclude: str = ""
                     ) -> tuple[float, float | None, str]:
    """(penalty, fp32's steps, where from) for a model whose curves were not measured: the
    mean over the measured models (each at its own target) of their penalty and of fp32's
    steps at ``p``. A method's extra steps come mostly from what its compressor does to the
    gradient, not from the model, so the other models' average is the least-assuming guess;
    ``inf`` only if the method failed on every measured model."""
    if not path.exists():
        return 1.0, None, "convergence not measured: assumed equal to fp32"
    data = json.loads(path.read_text())
    got = [(m, penalty(c, method, p)) for m, c in data.items()
           if m not in ("_meta", exclude) and isinstance(c, dict) and c.get("curves")]
    got = [(m, pen, ref) for m, (pen, ref, _) in got if ref is not None]
    if not got:
        return 1.0, None, "convergence not measured: assumed equal to fp32"
    names = "+".join(m for m, _, _ in got)
    finite = [pen for _, pen, _ in got if math.isfinite(pen)]
    ref = sum(r for _, _, r in got) / len(got)
    if not finite:
        return math.inf, ref, f"failed to reach the target on every measured model ({names})"
    pen = sum(finite) / len(finite)
    return pen, ref, f"{pen:.2f}x fp32's steps: mean of {names} (this model not measured)"


def predict(profiles: dict[str, StepProfile], p: int, link: Network, model: str,
            conv: dict | None = None, target: float | None = None,
            pool: bool = True) -> list[Prediction]:
    """Every profiled method's prediction on ``link`` with ``p`` ranks, fastest first.
    ``conv``: the model's curves (default: the stored ones; a model without them borrows the
    others' penalties, :func:`~lab.advise.estimate.borrowed_penalty`). ``pool``: the machine's
    share of each step (compute, collectives on loopback) pooled over the methods
    (:func:`lab.advise.machine.pooled`) instead of read off each method's own profile."""
    from .machine import pooled
    borrow = conv is None and not convergence(model).get("curves")
    conv = convergence(model) if conv is None else conv
    out = []
    for name, prof in (pooled(profiles) if pool else profiles).items():
        step, exposed = step_seconds(prof, p, link)
        pen, ref, why = (borrowed_penalty(name, p, exclude=model) if borrow
                         else penalty(conv, name, p, target))
        steps = pen * (ref if ref is not None else 1.0)
        parts = {"compute": prof.compute_s, "codec": prof.codec_s, "communication": exposed}
        top = max(parts, key=parts.get)
        where = " through the server" if _served(name) else ""
        reason = (f"{1e3 * step:.1f} ms/step ({top} {1e3 * parts[top]:.1f} ms), "
                  f"{prof.bytes / 1e3:.1f} kB/step{where}; {why}")
        out.append(Prediction(name, METHODS[name].family, prof.compute_s, prof.codec_s, exposed,
                              step, pen, steps, steps * step, reason))
    return sorted(out, key=lambda r: r.time_s)
