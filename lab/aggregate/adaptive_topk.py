"""AR-Topk with the density chosen online by the multi-objective controller.

Tyagi & Swany, IEEE BigData 2023 (arXiv 2312.02493), Sec. III-C, as the authors run it in
``flexible_compression/adaptive_moo/run_MOOCompression.py`` (sahiltyagi4/ARTopk):

- **warm-up**: for the first ``warmup_steps`` steps the density falls linearly from 1.0 to the
  largest candidate (their ``warmup_cr = flip(linspace(cr0, 1, warmup_steps))``; they count
  epochs, we count steps), the collective chosen by the cost model; ``warmup_steps=0`` is the
  lab's earlier variant (full compression from step 0);
- **decision**: after warm-up, the density is chosen by :class:`lab.adaptive.DensityController`
  (``method="nsga2"``: curve fits, NSGA-II and the ASF pick, weights 0.6 / 0.4; ``"grid"``:
  the lab's weighted sum over the candidates), re-chosen when the link changes or the smoothed
  gain shifts by more than ``shift`` (relative); the collective is switched as in ``artopk``.

Gains are measured on each rank's error-corrected gradient for every candidate at once (one
sort), every ``probe_every`` steps and whenever the link changes, and averaged with one
allreduce of ``len(candidates)`` floats (tag ``adaptive:gain``, in the ledger). Deviation: the
authors measure each candidate's gain in ``--explore-itrs`` training iterations run from a saved
model, once after warm-up and when the smoothed gain change passes a threshold; the aggregator
has no model to roll back, and one sort gives all candidates' gains on the same gradient. All
inputs to the decision are allreduced or shared and NSGA-II is seeded, so every rank chooses
the same density.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from ..adaptive import AUTHORS_CANDIDATES, DensityController, compression_gains
from ..compress.base import check_int
from .artopk import ARTopK
from .base import register

DEFAULT_CANDIDATES = AUTHORS_CANDIDATES


@register("adaptive_topk")
class AdaptiveTopK(ARTopK):
    name = "adaptive_topk"

    def __init__(self, comm, layerwise: bool = False, variant: str = "star",
                 candidates=DEFAULT_CANDIDATES, weights=(0.6, 0.4), method: str = "nsga2",
                 warmup_steps: int = 20, probe_every: int = 10, shift: float = 0.1,
                 gain_smoothing: float = 0.9, collective: str = "auto", leader: str = "windowed",
                 window: int = 25, smoothing: float | None = None, cost_model: str = "authors",
                 model_network: str = "10gbps"):
        self.controller = DensityController(list(candidates), tuple(weights), gain_smoothing,
                                            shift, method, cost_model)
        if method == "nsga2":  # import now, so the first decision is not charged for it
            import pymoo.algorithms.moo.nsga2  # noqa: F401
            import scipy.optimize  # noqa: F401
        self.probe_every = check_int("probe_every", probe_every, 1)
        self.warmup_steps = check_int("warmup_steps", warmup_steps, 0)
        top = self.controller.candidates[-1]
        # the authors' warm-up schedule: 1.0 at step 0 down to the largest candidate
        self.warmup = np.flip(np.linspace(top, 1.0, self.warmup_steps)).tolist()
        super().__init__(comm, layerwise, variant, top, collective, leader, window, smoothing,
                         cost_model, model_network)
        self._probed_net = object()
        self._decide_s, self._in_warmup = 0.0, False

    @classmethod
    def check(cls, cfg, workers):
        kw = cls.known_kw(cfg.aggregator_kw)
        DensityController(list(kw.pop("candidates", DEFAULT_CANDIDATES)),
                          tuple(kw.pop("weights", (0.6, 0.4))), method=kw.pop("method", "nsga2"),
                          model=kw.get("cost_model", "authors"))
        for name, low in (("probe_every", 1), ("warmup_steps", 0)):
            if name in kw:
                check_int(name, kw[name], low)
        cls.validate(**kw)

    def density_for(self, acc, step):
        self._decide_s, self._in_warmup = 0.0, step < self.warmup_steps
        if self._in_warmup:
            self.density = self.warmup[step]
            return self.density
        ctl, net = self.controller, self.comm.network
        if ctl.gains is None or net != self._probed_net or step % self.probe_every == 0:
            gains = torch.tensor(compression_gains(acc, ctl.ks(acc.numel())), dtype=torch.float32)
            self.comm.allreduce(gains, tag="adaptive:gain")
            ctl.observe((gains / self.comm.world_size).tolist())
            self._probed_net = net
        if ctl.needs_decision(net):
            link, t0 = self.link(), time.perf_counter()
            ctl.decide(acc.numel(), self.comm.world_size, link.latency, 1.0 / link.bandwidth,
                       self.variant, network=net)
            self._decide_s = time.perf_counter() - t0
        self.density = ctl.density
        return self.density

    def info(self) -> dict:
        ctl = self.controller
        gains = [] if ctl.gains is None else [float(g) for g in ctl.gains]
        return {**super().info(), "gains": gains,  # smoothed, one per candidate
                "warmup": self._in_warmup,
                "decide_s": self._decide_s}
