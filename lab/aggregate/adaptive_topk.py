"""AR-Topk with the density chosen online by the multi-objective controller.

Tyagi & Swany, IEEE BigData 2023 (arXiv 2312.02493), Sec. III-C, as the authors run it in
``flexible_compression/adaptive_moo/run_MOOCompression.py`` (sahiltyagi4/ARTopk):

- **warm-up**: for the first ``warmup_steps`` steps the density falls linearly from 1.0 to the
  largest candidate (their ``warmup_cr``; they count epochs, we count steps), the collective
  chosen by the cost model; ``warmup_steps=0`` is the lab's earlier variant;
- **decision**: after warm-up, the density is chosen by :class:`lab.adaptive.DensityController`
  (``method="nsga2"``: curve fits, NSGA-II and the ASF pick, weights 0.6 / 0.4; ``"grid"``:
  the lab's weighted sum over the candidates); the collective is switched as in ``artopk``;
- **when** (``trigger``): ``"link"`` is the authors' ``start_training``: NSGA-II runs only
  when the link differs from the last one (the first one: the link at step 0), and the last
  warm-up density stays until then; the gains are measured at each decision, fresh.
  ``"link+gain"`` (default, the lab's earlier reading) also re-decides when the smoothed gain
  shifts by more than ``shift`` (relative), and measures the gains every ``probe_every`` steps
  and whenever the link changes, smoothed by ``gain_smoothing``.

Gains are measured on each rank's error-corrected gradient for every candidate at once (one
sort) and averaged with one allreduce of ``len(candidates)`` floats (tag ``adaptive:gain``, in
the ledger). Deviation: the authors measure each candidate's gain in ``--explore-itrs``
training iterations run from a saved model (after warm-up, and again when a windowed EWMA of
the gain's relative change passes 0.1); the aggregator has no model to roll back, and one sort
gives all candidates' gains on the same gradient. The decision runs on rank 0 alone and its
density is broadcast (8 bytes, tag ``adaptive:decision``, in the ledger); the authors run the
same seeded NSGA-II on every rank, which gives the same density at p times the CPU (the ranks of
a book run share two cores). ``info()`` reports the decision's seconds on rank 0
(``decide_s``, 0 elsewhere) and the broadcast's (``share_s``: on the other ranks, the wait for
rank 0's decision) apart from the training step's.
"""
from __future__ import annotations

import time

import torch

from ..adaptive import AUTHORS_CANDIDATES, DensityController, compression_gains
from ..adaptive.moo import METHODS, TRIGGERS
from ..argspec import Arg, takes
from ..compress.base import check_int
from ..compress.topk import DENSITY
from .artopk import ARTOPK, ARTopK, _model_network
from .base import FACTOR, register

DEFAULT_CANDIDATES = AUTHORS_CANDIDATES
_UNSET = object()


def _rule(a) -> str | None:
    """Across arguments: the density controller takes its candidates, weights and method (three
    densities at least for NSGA-II), and ``model_network`` is a link."""
    try:
        DensityController(list(a["candidates"]), tuple(a["weights"]), a["gain_smoothing"],
                          a["shift"], a["method"], a["cost_model"], a["trigger"])
    except (TypeError, ValueError) as e:
        return str(e)
    return _model_network(a)


@register("adaptive_topk")
@takes(**ARTOPK, candidates=Arg(tuple, of=DENSITY, help="the densities chosen from"),
       weights=Arg(tuple, of=Arg(float, ge=0), help="weights of the two objectives"),
       method=Arg(str, choices=METHODS, help="how the trade-off is solved"),
       trigger=Arg(str, choices=TRIGGERS, help="when the density is re-chosen"),
       probe_every=Arg(int, ge=1, help="steps between measurements of the gains"),
       shift=Arg(float, gt=0, help="the controller's shift"), gain_smoothing=FACTOR,
       rule=_rule)
class AdaptiveTopK(ARTopK):
    """``info()`` adds the smoothed gains and, per step, the seconds spent deciding
    (``decide_s``, rank 0), in the decision's broadcast (``share_s``) and in the gains'
    allreduce (``probe_s``), each from its ledger record or clock; 0 on the steps that did
    none of them."""

    name = "adaptive_topk"

    def __init__(self, comm, layerwise: bool = False, variant: str = "star",
                 candidates=DEFAULT_CANDIDATES, weights=(0.6, 0.4), method: str = "nsga2",
                 warmup_steps: int = 20, probe_every: int = 10, shift: float = 0.1,
                 gain_smoothing: float = 0.9, collective: str = "auto", leader: str = "windowed",
                 window: int = 25, smoothing: float | None = None, cost_model: str = "authors",
                 model_network: str = "10gbps", trigger: str = "link+gain"):
        self.controller = DensityController(list(candidates), tuple(weights), gain_smoothing,
                                            shift, method, cost_model, trigger)
        if method == "nsga2":  # import now, so the first decision is not charged for it
            import pymoo.algorithms.moo.nsga2  # noqa: F401
            import scipy.optimize  # noqa: F401
        self.probe_every = check_int("probe_every", probe_every, 1)
        check_int("warmup_steps", warmup_steps, 0)
        top = self.controller.candidates[-1]  # the warm-up ends at the largest candidate
        super().__init__(comm, layerwise, variant, top, collective, leader, window, smoothing,
                         cost_model, model_network, warmup_steps=warmup_steps)
        self._probed_net = object()
        self._first_net = _UNSET     # the first link seen (the authors' last_latency, last_bw)
        self._decide_s = self._probe_s = self._share_s = 0.0

    @classmethod
    def check(cls, cfg, workers):
        kw = cls.known_kw(cfg.aggregator_kw)
        DensityController(list(kw.pop("candidates", DEFAULT_CANDIDATES)),
                          tuple(kw.pop("weights", (0.6, 0.4))), method=kw.pop("method", "nsga2"),
                          model=kw.get("cost_model", "authors"),
                          trigger=kw.pop("trigger", "link+gain"))
        for name, low in (("probe_every", 1), ("warmup_steps", 0)):
            if name in kw:
                check_int(name, kw[name], low)
        cls.validate(**kw)

    def density_for(self, acc, step):
        self._decide_s = self._probe_s = self._share_s = 0.0
        ctl, net = self.controller, self.comm.network
        if self._first_net is _UNSET:
            self._first_net = net
        warm = super().density_for(acc, step)
        if self._in_warmup:
            return warm
        if ctl.trigger == "link":
            if ctl.density is None:   # after warm-up: hold its last density on the first link
                ctl.hold(ctl.candidates[-1], self._first_net)
            probe = ctl.needs_decision(net)
        else:
            probe = ctl.gains is None or net != self._probed_net or step % self.probe_every == 0
        if probe:
            gains = torch.tensor(compression_gains(acc, ctl.ks(acc.numel())), dtype=torch.float32)
            self.comm.allreduce(gains, tag="adaptive:gain")
            self._probe_s += self.comm.ledger.records[-1].seconds
            ctl.observe((gains / self.comm.world_size).tolist(), fresh=ctl.trigger == "link")
            self._probed_net = net
        if ctl.needs_decision(net):
            self._decide(acc.numel(), net)
        self.density = ctl.density
        return self.density

    def _decide(self, n: int, net) -> None:
        """Rank 0 decides; its density reaches the others by one broadcast (in the ledger)."""
        ctl, comm, link = self.controller, self.comm, self.link()
        args = (n, comm.world_size, link.latency, 1.0 / link.bandwidth, self.variant)
        chosen = torch.full((1,), float("nan"), dtype=torch.float64)
        if comm.rank == 0:
            t0 = time.perf_counter()
            chosen[0] = ctl.decide(*args, network=net)
            self._decide_s = time.perf_counter() - t0
        if comm.world_size > 1:
            comm.broadcast(chosen, src=0, tag="adaptive:decision")
            self._share_s = comm.ledger.records[-1].seconds
            if comm.rank != 0:
                ctl.adopt(float(chosen[0]), *args, network=net)

    def info(self) -> dict:
        ctl = self.controller
        gains = [] if ctl.gains is None else [float(g) for g in ctl.gains]
        return {**super().info(), "gains": gains,  # smoothed, one per candidate
                "decide_s": self._decide_s, "share_s": self._share_s,
                "probe_s": self._probe_s}
