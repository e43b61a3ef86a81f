"""What a statistics-forging attacker (ALIE, IPM) knows, and how it learns it.

``knowledge`` names whose messages the attackers' statistics come from:

- ``"own"``: the Byzantine workers' own honest-computed messages, pooled among themselves (the
  non-omniscient attacker of Baruch et al., NeurIPS 2019). They allreduce over a process group
  of the Byzantine ranks only: honest ranks send nothing.
- ``"honest"``: the honest workers' messages (omniscient: Xie et al., UAI 2019; the ALIE variant
  of later work). Every rank joins the allreduce and the Byzantine ranks add zeros, so the sums
  run over the honest rows only. These bytes model an eavesdropper, not a cost of the defence.

A message is what the rank would send if honest: its gradient, or what the aggregator sends
instead (centered clipping's worker momentum, :meth:`lab.aggregate.Aggregator.local`). The
statistics are the coordinate-wise mean and population standard deviation (ddof = 0, as
``np.var`` in the ALIE authors' code), in two rounds tagged ``attack`` in the ledger: the mean,
then the squared deviations from it (a sum of squares minus the squared mean would cancel
catastrophically in float32 when the spread is small next to the mean).
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from ..argspec import Arg
from ..comm import Collective
from .base import Attack

KNOWLEDGE = ("own", "honest")
#: whose messages the statistics come from: the attackers' own, or the honest workers'
KNOWLEDGE_ARG = Arg(str, choices=KNOWLEDGE, help="'own': statistics of the Byzantine workers' "
                    "own gradients; 'honest': of the honest workers' gradients (omniscient)")


def check_knowledge(attack: str, knowledge) -> str:
    """``knowledge`` (:data:`KNOWLEDGE_ARG`); an error names ``attack``."""
    return KNOWLEDGE_ARG.check(knowledge, "knowledge", attack)


class StatisticsAttack(Attack):
    """Byzantine ranks send :meth:`forge` of the statistics that ``knowledge`` gives them."""

    needs_spread = True  # False: the mean is enough (IPM), one round instead of two

    def __init__(self, engine, byzantine: bool, knowledge: str):
        super().__init__(engine, byzantine)
        self.knowledge = check_knowledge(self.name, knowledge)
        n, self.f = engine.world_size, engine.cfg.byzantine
        self.channel = None  # the Collective the statistics travel on; None: no part in them
        if self.f == 0:
            return
        if knowledge == "honest":
            self.channel = engine.comm
        elif self.f > 1 and dist.is_available() and dist.is_initialized():
            # new_group is collective: every rank creates it, members or not
            group = dist.new_group(list(range(n - self.f, n)))
            if byzantine:
                self.channel = Collective(group=group, ledger=engine.comm.ledger)
        elif byzantine:  # a single attacker knows its own message without a collective
            self.channel = Collective(ledger=engine.comm.ledger)

    def on_gradient(self, grads, step):
        if self.channel is None:
            return grads
        flat = torch.cat([g.detach().reshape(-1).float() for g in grads])
        mean, std = self.statistics(flat)
        if not self.byzantine:
            return grads
        forged = self.forge(mean, std)
        return [v.view_as(g).to(g.dtype) for v, g in
                zip(forged.split([g.numel() for g in grads]), grads)]

    def statistics(self, flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Coordinate-wise mean and std (None unless ``needs_spread``) of the known messages."""
        comm = self.channel
        if comm is not self.engine.comm:
            comm.network = self.engine.comm.network  # the run's link, which may change per step
        if self.knowledge == "honest":
            known, count = not self.byzantine, self.engine.world_size - self.f
        else:
            known, count = True, self.f
        mine = flat.clone() if known else torch.zeros_like(flat)
        mean = comm.allreduce(mine, tag="attack") / count
        if not self.needs_spread:
            return mean, None
        dev = (flat - mean) ** 2 if known else torch.zeros_like(flat)
        return mean, (comm.allreduce(dev, tag="attack") / count).sqrt()

    def forge(self, mean: torch.Tensor, std: torch.Tensor | None) -> torch.Tensor:
        raise NotImplementedError
