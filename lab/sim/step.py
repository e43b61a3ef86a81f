"""One configuration's step time, its parts and its error band; time to a target.

``step = compute + codec + exposed communication``:

- compute: forward + backward per rank (given, or a measured profile; :mod:`lab.sim.calibrate`);
  on a machine with ``cores`` cores shared by more ranks, each rank's codec work is stretched by
  ``ranks / cores`` (the advisor's machine share, :mod:`lab.advise.machine`);
- codec: seconds per model value of one rank's whole exchange on ``p`` ranks (an allgather's
  ``p`` payloads decoded included, as :func:`lab.advise.codec_speed.per_value` measures it);
  plus, in the second model, the exchange's own time off the wire (``exchange_s``: flattening
  into one buffer and back, the ledger), measured in the calibration's loopback run;
- communication: the technique's traffic (:func:`lab.sim.codec.traffic`) priced per collective
  on the cluster (:mod:`lab.sim.collectives`), never below ``floor_s`` (what the same rounds
  cost on this machine's loopback, ranks sharing cores), exposed as the schedule says
  (:mod:`lab.sim.overlap`); the asynchronous parameter server: the server's link carries the
  ``p - 1`` workers' pushes and pulls in series (Li et al., OSDI 2014; Dean et al., NeurIPS 2012);
  in the third model the server's NIC is full duplex: pushes come in while pulls go out, so
  ``p - 1`` workers cost the server ``p - 1`` one-way transfers and its updates, and one
  worker's own cycle (compute, push, update, pull) bounds the step from below;
  in the fourth model an allgather's floor is its own loopback cost per call
  (``floor_call_s``, :func:`lab.sim.calibrate.allgather_floor`), not ``p - 1`` of the
  allreduce's rounds.

The band is the validation's: the geomean and worst relative error of the technique's family on
held-out runs (:mod:`lab.sim.validate`), stated beside each prediction.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from . import collectives, overlap
from .codec import technique, traffic
from .network import Cluster


@dataclass(frozen=True)
class Config:
    """What a prediction needs: layer ``shapes``, ``technique``, a
    :class:`~lab.sim.network.Cluster`, compute
    per rank and step (s), codec seconds per value, the loopback floor per collective round (s),
    the cores the ranks share (``None``: a rank per device).

    ``traffic``: a step's measured ``((op, calls, bytes per call), ...)`` (a ledger's, as the
    advisor's profiles hold it) in place of the technique's formula; for the parameter server,
    what its link carries for ``traffic_workers`` workers. ``floor_s``: the whole step's
    loopback communication (measured) in place of the per-round floor. ``algorithm``: the
    allreduce's, 'ring' or 'tree'. ``exchange_s``: an exchange's own time off the wire
    (flattening the gradients into one buffer and back, the ledger's bookkeeping), measured in
    the same loopback run as the floor, paid once per exchange. ``server_duplex``: the
    parameter server's NIC carries pushes in and pulls out at once (model 3): true of a
    real NIC and of a kernel link (tbf shapes each direction on its own); the emulated link
    (``link="model"``) keeps one clock per rank for both directions, so predictions for it,
    as the advisor's, leave it False. ``floor_call_s``: ``((op, seconds), ...)``, a measured
    loopback floor per call of ``op`` (model 4: the allgather's) in place of its rounds times
    ``floor_per_round_s``."""

    shapes: tuple
    technique: str
    cluster: Cluster
    compute_s: float
    codec_s_per_value: float = 0.0
    floor_per_round_s: float = 0.0
    cores: int | None = None
    servers: int = 1
    server_s_per_value: float = 0.0
    traffic: tuple = ()
    traffic_workers: int = 1
    floor_s: float | None = None
    algorithm: str = "ring"
    exchange_s: float = 0.0
    server_duplex: bool = False
    floor_call_s: tuple = ()

    def __post_init__(self):
        technique(self.technique)
        if self.algorithm not in ("ring", "tree"):
            raise ValueError(f"algorithm must be 'ring' or 'tree', got {self.algorithm!r}")
        if self.floor_s is not None and not (0 <= self.floor_s < math.inf):
            raise ValueError(f"floor_s must be a finite number >= 0 or None, got {self.floor_s!r}")
        if not (self.compute_s >= 0) or math.isinf(self.compute_s):
            raise ValueError(f"compute_s must be a finite number >= 0, got {self.compute_s!r}")
        if not self.shapes:
            raise ValueError("shapes must list the model's layer shapes, got none")
        for item in self.floor_call_s:
            if len(item) != 2 or not (0 <= item[1] < math.inf):
                raise ValueError(f"floor_call_s must hold (op, finite seconds >= 0) pairs, "
                                 f"got {item!r}")


@dataclass(frozen=True)
class Prediction:
    """One predicted step: its time and its parts (s), the bytes a rank hands to the network,
    and the technique's family (whose validation error is the prediction's band)."""

    step_s: float
    compute_s: float
    codec_s: float
    comm_s: float          # exposed communication
    bytes: float           # bytes a rank hands to the network per step
    family: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def family(name: str) -> str:
    """The validation family a technique belongs to (its error band)."""
    if name.startswith("topk-"):
        return "sparsification"
    if name.startswith("powersgd-"):
        return "low rank"
    return {"fp32": "dense", "bf16": "dense", "fp16": "dense", "qsgd": "quantization",
            "terngrad": "quantization", "topk+ef": "sparsification", "dgc": "sparsification",
            "powersgd": "low rank", "local-sgd": "local SGD", "fifo": "schedule",
            "p3": "schedule", "async-ps": "parameter server", "signsgd": "quantization"}[name]


def _rounds(op: str, p: int) -> float:
    return {"allreduce": 2 * (p - 1), "allgather": p - 1, "ps": 2.0}.get(op, 1.0)


def predict(cfg: Config) -> Prediction:
    """The step of ``cfg`` (see the module doc)."""
    c, t = cfg.cluster, technique(cfg.technique)
    p = c.ranks
    share = max(1.0, p / cfg.cores) if cfg.cores else 1.0
    sizes = [math.prod(s) for s in cfg.shapes]
    n = sum(sizes)
    plan = cfg.traffic or traffic(cfg.technique, cfg.shapes)
    sent = sum(calls * b for _, calls, b in plan)
    if t.get("op") == "ps":
        return _ps(cfg, n, share)
    codec = cfg.codec_s_per_value * n * share + cfg.exchange_s / t.get("period", 1)
    comm, per_call = 0.0, dict(cfg.floor_call_s)
    for op, calls, b in plan:
        link = collectives.op_seconds(op, b, c, cfg.algorithm)
        floor = per_call.get(op, _rounds(op, p) * cfg.floor_per_round_s)
        floor = floor if cfg.floor_s is None else 0.0
        comm += calls * max(link, floor)
    if cfg.floor_s is not None:   # the measured loopback step: a floor on all of it
        comm = max(comm, cfg.floor_s)
    if t.get("schedule") in ("fifo", "p3"):
        step = overlap.overlapped_step(t["schedule"], sizes, cfg.compute_s, c)
        floor = (_rounds("allreduce", p) * cfg.floor_per_round_s if cfg.floor_s is None
                 else cfg.floor_s)
        step = max(step, cfg.compute_s + floor)
        return Prediction(step, cfg.compute_s, 0.0, step - cfg.compute_s, sent,
                          family(cfg.technique))
    return Prediction(cfg.compute_s + codec + comm, cfg.compute_s, codec, comm, sent,
                      family(cfg.technique))


def _ps(cfg: Config, n: int, share: float) -> Prediction:
    """Asynchronous parameter server, rank 0 serving ``p - 1`` workers (see the module doc)."""
    c = cfg.cluster
    workers = c.ranks - 1
    if workers < 1:
        raise ValueError("a parameter server needs ranks >= 2 (rank 0 serves)")
    if cfg.traffic:   # measured for traffic_workers workers: one worker's share, priced
        one = sum(calls * collectives.op_seconds(op, b, c) for op, calls, b in cfg.traffic)
        one, sent = one / cfg.traffic_workers, sum(k * b for _, k, b in cfg.traffic)
    else:
        one, sent = 2 * (c.alpha + 4.0 * n * c.beta("broadcast")) / cfg.servers, 8.0 * n
    update = cfg.server_s_per_value * n * share
    # full duplex: a push and a pull cross the server's NIC in opposite directions at once
    server = workers * ((one / 2 if cfg.server_duplex else one) + update)
    if cfg.floor_s is None:
        server = max(server, workers * 2 * cfg.floor_per_round_s)
    cycle = cfg.compute_s + (one + update if cfg.server_duplex else server / workers)
    step = max(server, cycle, cfg.floor_s or 0.0)
    return Prediction(step, cfg.compute_s, 0.0, step - cfg.compute_s, sent,
                      family(cfg.technique))


def time_to_target(cfg: Config, model: str, fp32_steps: float | None = None) -> tuple[float, str]:
    """(seconds to the target, where the step count comes from): the step times the advisor's
    measured convergence penalty (:func:`lab.advise.estimate.penalty`, steps relative to fp32 at
    the nearest measured world size), times fp32's steps."""
    from ..advise.estimate import borrowed_penalty, convergence, penalty
    name = {"topk+ef": "topk+ef", "bf16": "fp16", "fifo": "fp32"}.get(cfg.technique, cfg.technique)
    conv = convergence(model)
    p = cfg.cluster.ranks
    pen, ref, why = penalty(conv, name, p) if conv.get("curves") else borrowed_penalty(name, p)
    steps = pen * (fp32_steps if fp32_steps is not None else (ref or 1.0))
    return steps * predict(cfg).step_s, why
