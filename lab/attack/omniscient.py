"""What an omniscient attacker knows: the mean and spread of the honest gradients.

ALIE and IPM assume the attackers know the other workers' gradients. Here every rank
(honest or not) joins two allreduces of its *true* gradient, tagged ``attack`` in the ledger:
the sum and the sum of squares, from which every rank gets the coordinate-wise mean and
standard deviation over all n workers' true gradients (the Byzantine ranks' own true
gradients are honest samples too). This costs two extra gradient-sized allreduces per step;
they model the attacker's knowledge, not a cost of the defence.
"""
from __future__ import annotations

import torch

from .base import Attack


class OmniscientAttack(Attack):
    """Computes the honest statistics on every rank; Byzantine ranks send :meth:`forge`."""

    def on_gradient(self, grads, step):
        flat = torch.cat([g.detach().reshape(-1).float() for g in grads])
        comm, n = self.engine.comm, self.engine.world_size
        total = comm.allreduce(flat.clone(), tag="attack")
        squares = comm.allreduce(flat * flat, tag="attack")
        mean = total / n
        std = (squares / n - mean * mean).clamp_min(0).sqrt()
        if not self.byzantine:
            return grads
        forged = self.forge(mean, std)
        return [v.view_as(g).to(g.dtype) for v, g in
                zip(forged.split([g.numel() for g in grads]), grads)]

    def forge(self, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError
