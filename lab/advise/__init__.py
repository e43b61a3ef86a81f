"""The method advisor (Part 10): which communication-efficient method to use on a given cluster.

``advise(model, workers, network)`` ranks the methods of :data:`~lab.advise.methods.METHODS` by
predicted time to a target quality (:mod:`lab.advise.estimate`): one step's compute and codec time
measured on this machine, its ledger traffic priced on the link by the alpha-beta model, and the
number of steps from the convergence penalties that Part 10's runs measured
(``python -m lab bench grid``). ``python -m lab advise`` is the same from the shell. A model of
your own, given by its parameter count and compute time, has its codec time measured per value
on this machine, one process at a time (:mod:`lab.advise.codec_speed`).
"""
from __future__ import annotations

from dataclasses import replace

from ..comm.network import Network
from .methods import METHODS, Method, get
from .estimate import Prediction, convergence, predict
from .profile import StepProfile, measure

__all__ = ["METHODS", "Method", "Prediction", "StepProfile", "advise", "convergence",
           "curves_for", "measure", "predict"]


def curves_for(model: str, methods=None, target: float | None = None, probe: bool = True,
               use_cache: bool = True, progress: bool = False) -> dict | None:
    """The curves the advisor reads ``model``'s penalties from: ``None`` for the stored ones
    (:func:`~lab.advise.convergence`), else, with ``probe`` and a target accuracy (``target``
    or the model's default), curves measured on two local ranks and cached
    (:func:`lab.advise.curves.probed`); otherwise ``None``: the penalties are borrowed from the
    stored models."""
    from .methods import TARGETS
    if convergence(model).get("curves") or not probe or (target is None and model not in TARGETS):
        return None
    from .curves import probed
    return probed(model, methods, target, use_cache, progress)


def advise(model: str = "mlp", workers: int = 4, network="1gbps", methods=None,
           target: float | None = None, params: int | None = None,
           compute_ms: float | None = None, steps: int = 16, use_cache: bool = True,
           probe: bool = True, progress: bool = False) -> list[Prediction]:
    """Methods ranked by predicted time to target, fastest first.

    ``model`` is one of ``lab.models.names()``; or give ``params`` (a parameter count) and
    ``compute_ms`` (forward + backward per step and rank) to describe your own: the ``model``'s
    measured traffic is then scaled by ``params`` over its parameter count (bytes are per
    value), compute is yours, and each method's codec time is its time per value measured on
    this machine, one process at a time, on a gradient of ``model``'s layers scaled up
    (:func:`lab.advise.codec_speed.per_value`), times ``params``: never a profile of
    ``workers`` ranks sharing this machine's cores, scaled. fp32 and the other methods without
    a codec have none. Communication is the link's alpha-beta price alone (the loopback floor
    of a profile is this machine's, not your cluster's). ``network`` is a
    :class:`~lab.comm.network.Network`, a preset or ``"1Gbps,1ms"``; ``target`` a held-out
    accuracy (default: the one the model's convergence curves were measured for). Profiles are measured on
    ``workers`` local ranks for ``steps`` steps once and cached. A model without stored curves
    has them measured once on two local ranks (``probe``, :func:`curves_for`; about half a
    minute, cached), or, with ``probe=False``, ``params``, or no target accuracy known for it
    (give ``target``), borrows the stored models' penalties. ``progress``: what is measured
    said on stderr as it goes (how long, where it is cached, a line per method); nothing
    when every profile is cached. Each prediction's ``machine`` names the CPU its codec time
    (and, without ``params``, its compute) was measured on (``lab.bench.table.machine``); its
    ``band`` is lab.sim's worst step-time error on its family's held-out runs
    (:func:`lab.advise.validated.band_of`; ``None``: not validated).
    """
    link = Network.parse(network)
    if link is None:
        raise ValueError("network must name a link (e.g. '1Gbps,1ms'), got None")
    if not isinstance(workers, int) or workers < 2:
        raise ValueError(f"workers must be an int >= 2, got {workers!r}")
    if (params is None) != (compute_ms is None):
        raise ValueError("params and compute_ms go together: give both or neither")
    if params is not None and (params <= 0 or compute_ms <= 0):
        raise ValueError(f"params and compute_ms must be > 0, got {params}, {compute_ms}")
    chosen = [get(m) for m in (methods or METHODS)]
    profiles = measure(chosen, model=model, world=workers, steps=steps, use_cache=use_cache,
                       progress=progress)
    conv = None
    if params is not None:
        from .codec_speed import per_value
        codec, server, _ = per_value(chosen, model, workers, params, use_cache,
                                     progress=progress)
        profiles = {k: _scaled(v, params, compute_ms / 1e3, codec[k] * params,
                               server * params * (v.world - 1))
                    for k, v in profiles.items()}
    else:
        conv = curves_for(model, chosen, target, probe, use_cache, progress)
    from ..bench.table import machine
    from .validated import band_of
    here = machine()
    return [replace(r, machine=here, **dict(zip(("band", "band_source"), band_of(r.method))))
            for r in predict(profiles, workers, link, model, conv=conv, target=target)]


def _scaled(prof: StepProfile, params: int, compute_s: float, codec_s: float,
            server_s: float = 0.0) -> StepProfile:
    """``prof`` as a model of ``params`` values would have it: traffic scaled by ``params``
    over the profiled model's size, and compute, codec time and (a parameter server) the
    server's work per step as given; no loopback floor (``comm_s``: it is this machine's)."""
    f = params / prof.params
    traffic = {op: [calls, nbytes * f] for op, (calls, nbytes) in prof.traffic.items()}
    return replace(prof, compute_s=compute_s, codec_s=codec_s, traffic=traffic, params=params,
                   comm_s=0.0, server_s=server_s if prof.server_s else 0.0)
