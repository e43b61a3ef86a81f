"""AR-Topk with the density chosen online by the multi-objective controller.

Tyagi & Swany, IEEE BigData 2023 (arXiv 2312.02493), Sec. III-C: the density is picked from
``candidates`` on the Pareto front of (modeled communication time, 1 / compression gain),
weights 0.6 / 0.4 (:mod:`lab.adaptive.moo`), and the collective is switched as in ``artopk``.
Gains are measured on each rank's error-corrected gradient every ``probe_every`` steps and
whenever the link changes, averaged with one allreduce of ``len(candidates)`` floats (tag
``adaptive:gain``, in the ledger); the density is re-chosen when the link changes or the
smoothed gain at the chosen density shifts by more than ``shift`` (relative). All inputs to the
decision are allreduced or shared, so every rank chooses the same density.
"""
from __future__ import annotations

import torch

from ..adaptive import DensityController, compression_gains
from ..compress.base import check_int
from .artopk import ARTopK
from .base import register

DEFAULT_CANDIDATES = (0.001, 0.005, 0.01, 0.05, 0.1)


@register("adaptive_topk")
class AdaptiveTopK(ARTopK):
    name = "adaptive_topk"

    def __init__(self, comm, layerwise: bool = False, variant: str = "star",
                 candidates=DEFAULT_CANDIDATES, weights=(0.6, 0.4), probe_every: int = 10,
                 shift: float = 0.1, collective: str = "auto", smoothing: float = 0.9,
                 model_network: str = "10gbps"):
        self.controller = DensityController(list(candidates), tuple(weights), smoothing, shift)
        self.probe_every = check_int("probe_every", probe_every, 1)
        super().__init__(comm, layerwise, variant, self.controller.candidates[-1], collective,
                         smoothing, model_network)
        self._probed_net = object()

    @classmethod
    def check(cls, cfg, workers):
        kw = cls.known_kw(cfg.aggregator_kw)
        DensityController(list(kw.pop("candidates", DEFAULT_CANDIDATES)),
                          tuple(kw.pop("weights", (0.6, 0.4))))
        if "probe_every" in kw:
            check_int("probe_every", kw["probe_every"], 1)
        cls.validate(**kw)

    def density_for(self, acc, step):
        ctl, net = self.controller, self.comm.network
        if ctl.gains is None or net != self._probed_net or step % self.probe_every == 0:
            gains = torch.tensor(compression_gains(acc, ctl.ks(acc.numel())), dtype=torch.float32)
            self.comm.allreduce(gains, tag="adaptive:gain")
            ctl.observe((gains / self.comm.world_size).tolist())
            self._probed_net = net
        if ctl.needs_decision(net):
            link = self.link()
            ctl.decide(acc.numel(), self.comm.world_size, link.latency, 1.0 / link.bandwidth,
                       self.variant, network=net)
        self.density = ctl.density
        return self.density

    def info(self) -> dict:
        ctl = self.controller
        return {**super().info(), "gain": float(ctl.gains[ctl.index]),
                "gains": [float(g) for g in ctl.gains]}  # smoothed, one per candidate
