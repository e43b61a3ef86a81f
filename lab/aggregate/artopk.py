"""AR-Topk: an allreduce-compatible Top-k, with the collective switched by the cost model.

Tyagi & Swany, "Flexible Communication for Optimal Distributed Learning over Unpredictable
Networks", IEEE BigData 2023 (arXiv 2312.02493), Sec. III. Per step, on the error-corrected
gradient ``a = g + e`` of each rank (``e`` starts at zero):

1. a leader ``r`` is chosen (``variant="star"``: round-robin; ``"var"``: largest smoothed
   norm, by default the authors' windowed EWMA of ``||g||``, ``leader="ema"`` the lab's EMA
   of ``||g + e||``; see :mod:`lab.adaptive.leader`);
2. the leader takes ``I = top_k(a_r)`` and broadcasts the k int32 indices;
3. every rank takes its own ``a[I]``; one dense allreduce (ring or tree) sums the k values;
4. each rank keeps its own residual ``e <- a - a[I]`` (zero at I).

Per-rank traffic is 4k + 4k bytes whatever the world size. ``collective="allgather"`` is
plain Top-k instead (every rank its own indices; values and indices allgathered), and
``"auto"`` picks, each step, the option with the lowest modeled cost
(:mod:`lab.adaptive.switching`; ``cost_model="authors"`` by default) on the link in force
(``comm.network``; without an emulated network, the ``model_network`` preset is priced). The
chosen tree allreduce is emulated with the tree model. ``warmup_steps=W`` lowers the density
linearly from 1.0 to ``density`` over the first W steps (the authors' compression warm-up,
``warmup_cr`` in ``adaptive_moo/run_MOOCompression.py``; default 0: none). Fixes over the
reference code: the residual starts at zero (not ``torch.empty``), nothing calls CUDA on a
CPU run, and indices travel as the int32 they are priced at. Which exchange a step ran is
read from the ledger by :func:`lab.adaptive.exchange_taken`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import inspect

import numpy as np
import torch

from ..adaptive import (COLLECTIVES, COST_MODELS, LEADER_RULES, VarLeader, choose, exchange_costs,
                        star_leader)
from ..argspec import Arg, takes
from ..comm import Network
from ..compress.base import check_finite
from ..compress.topk import DENSITY, check_density, resolve_k, topk_indices
from .base import LAYERWISE, Aggregator, register

VARIANTS = ("star", "var")


def _model_network(a) -> str | None:
    """The rule of ``model_network``: a link :meth:`Network.parse` reads."""
    try:
        net = Network.parse(a["model_network"])
    except ValueError as e:
        return f"model_network: {e}"
    return None if net is not None else "model_network must name a link, e.g. '10gbps'"


#: what STAR/VAR-Topk and its adaptive form share
ARTOPK = dict(
    layerwise=LAYERWISE, variant=Arg(str, choices=VARIANTS, help="how the leader is chosen"),
    collective=Arg(str, choices=("auto", *COLLECTIVES), help="the collective (auto: cheapest)"),
    leader=Arg(str, choices=LEADER_RULES, help="VAR-Topk's smoothing of the norms"),
    window=Arg(int, ge=1, le=10 ** 6, help="steps of the windowed leader rule"),
    smoothing=Arg(float, ge=0, lt=1, none=True, help="the leader rule's smoothing"),
    cost_model=Arg(str, choices=COST_MODELS, help="how the collectives are priced"),
    model_network=Arg((str, Network), help="the link priced without an emulated one"),
    warmup_steps=Arg(int, ge=0, help="steps of the dense-to-sparse warm-up"))


def warmup_densities(top: float, steps: int) -> list[float]:
    """The authors' warm-up: ``flip(linspace(top, 1, steps))``, 1.0 at step 0 down to ``top``."""
    return np.flip(np.linspace(top, 1.0, steps)).tolist()


@register("artopk")
@takes(**ARTOPK, density=DENSITY,
       measure_overlap=Arg(bool, help="measure the exchange's overlap with backward"),
       rule=_model_network)
class ARTopK(Aggregator):
    """STAR/VAR-Topk with error feedback; ``info()`` gives the collective, density, k, leader
    (-1 for allgather) and the modeled cost of each alternative, per step."""

    name = "artopk"

    def __init__(self, comm, layerwise: bool = False, variant: str = "star",
                 density: float = 0.01, collective: str = "auto", leader: str = "windowed",
                 window: int = 25, smoothing: float | None = None, cost_model: str = "authors",
                 model_network: str = "10gbps", measure_overlap: bool = False,
                 warmup_steps: int = 0):
        self.validate(variant=variant, density=density, collective=collective,
                      cost_model=cost_model, leader=leader, window=window, smoothing=smoothing)
        self.measure_overlap = bool(measure_overlap)
        self.warmup = warmup_densities(density, warmup_steps)
        self._in_warmup = False
        super().__init__(comm, None, layerwise)
        self.variant, self.density, self.collective = variant, density, collective
        self.model_network = Network.parse(model_network)
        if self.model_network is None:
            raise ValueError("model_network must name a link, e.g. '10gbps'")
        self.cost_model = cost_model
        self.var_leader = VarLeader(comm, leader, window, smoothing) if variant == "var" else None
        self.residuals: dict = {}
        self._info: dict = {}

    @staticmethod
    def validate(variant="star", density=0.01, collective="auto", cost_model="authors",
                 leader="windowed", window=25, smoothing=None, **_):
        VarLeader(None, leader, window, smoothing)  # raises on bad leader options
        if cost_model not in COST_MODELS:
            raise ValueError(f"cost_model must be one of {COST_MODELS}, got {cost_model!r}")
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
        check_density(density, None)
        if collective != "auto" and collective not in COLLECTIVES:
            raise ValueError(f"collective must be 'auto' or one of {COLLECTIVES}, got {collective!r}")

    @classmethod
    def known_kw(cls, kw: dict) -> dict:
        """``kw`` if every key is an argument of this aggregator, else a ValueError naming it."""
        known = set(inspect.signature(cls.__init__).parameters) - {"self", "comm"}
        unknown = sorted(set(kw) - known)
        if unknown:
            raise ValueError(f"aggregator_kw: {cls.name} takes no argument(s) {unknown}; "
                             f"known: {', '.join(sorted(known))}")
        return dict(kw)

    @classmethod
    def check(cls, cfg, workers):
        cls.validate(**cls.known_kw(cfg.aggregator_kw))

    # -- decisions (identical on every rank: they use only shared quantities) ----------------
    def link(self) -> Network:
        return self.comm.network or self.model_network

    def density_for(self, acc: torch.Tensor, step: int) -> float:
        """The density of this step: the warm-up's, then fixed (chosen online by
        ``adaptive_topk``)."""
        self._in_warmup = step < len(self.warmup)
        return self.warmup[step] if self._in_warmup else self.density

    def leader(self, acc: torch.Tensor, step: int, grad: torch.Tensor | None = None) -> int:
        if self.var_leader is None:
            return star_leader(step, self.comm.world_size)
        raw = self.var_leader.raw_norm and grad is not None
        return self.var_leader.pick(float((grad if raw else acc).norm()))

    @contextlib.contextmanager
    def _emulate(self, algorithm: str):
        """Price the values' allreduce on the emulated link with the chosen algorithm."""
        net = self.comm.network
        if net is not None:
            self.comm.network = dataclasses.replace(net, algorithm=algorithm)
        try:
            yield
        finally:
            self.comm.network = net

    # -- the exchange -------------------------------------------------------------------------
    def reduce(self, tensor, key, step):
        check_finite(tensor, "artopk")
        flat = tensor.detach().reshape(-1)
        e = self.residuals.get(key)
        acc = flat.clone() if e is None else flat + e  # residual starts at zero
        n, p = acc.numel(), self.comm.world_size
        density = self.density_for(acc, step)
        k = resolve_k(n, density)
        net = self.link()
        costs = exchange_costs(k, p, net.latency, 1.0 / net.bandwidth, self.variant,
                               self.cost_model)
        collective = choose(costs) if self.collective == "auto" else self.collective
        total, overlap = torch.zeros_like(acc), 1.0  # allgather: each rank sends its own top-k
        if collective == "allgather":
            leader = -1
            idx = topk_indices(acc, k).to(torch.int32)
            for vals, ids in self.comm.allgather_payload((acc[idx.long()], idx),
                                                         tag="artopk:allgather", same_size=True):
                total.index_add_(0, ids.long(), vals)
        else:
            leader = self.leader(acc, step, flat)
            idx = (topk_indices(acc, k).to(torch.int32) if self.comm.rank == leader
                   else torch.zeros(k, dtype=torch.int32))
            self.comm.broadcast(idx, src=leader, tag="artopk:indices")
            vals = acc[idx.long()]
            with self._emulate(collective):
                self.comm.allreduce(vals, tag="artopk:values")
            total[idx.long()] = vals
            if self.measure_overlap:
                overlap = self.overlap(acc, idx)
        self.residuals[key] = acc.index_fill(0, idx.long(), 0)  # e <- a - (what this rank sent)
        self._info = {"collective": collective, "density": density, "k": k, "leader": leader,
                      "warmup": self._in_warmup, **{f"cost_{c}_s": t for c, t in costs.items()}}
        if self.measure_overlap:
            self._info["overlap"] = overlap
        return total.div_(p).view_as(tensor)

    def overlap(self, acc: torch.Tensor, idx: torch.Tensor) -> float:
        """Fraction of this rank's own top-k that the leader's indices cover, averaged over
        ranks (a measurement for the book: one extra allreduce of 4 bytes, tag artopk:overlap)."""
        own = torch.zeros(acc.numel(), dtype=torch.bool)
        own[topk_indices(acc, idx.numel())] = True
        frac = torch.tensor([float(own[idx.long()].float().mean()) if idx.numel() else 1.0])
        self.comm.allreduce(frac, tag="artopk:overlap")
        return float(frac) / self.comm.world_size

    def info(self) -> dict:
        return dict(self._info)
