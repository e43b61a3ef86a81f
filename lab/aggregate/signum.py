"""Signum with majority vote: the sign of momentum, aggregated by vote.

Bernstein, Wang, Azizzadenesheli, Anandkumar, "signSGD: Compressed Optimisation for
Non-Convex Problems", ICML 2018 (Signum), and Bernstein, Zhao, Azizzadenesheli, Anandkumar,
"signSGD with Majority Vote is Communication Efficient and Fault Tolerant", ICLR 2019
(Algorithm 1, with momentum): on every rank

    m <- beta * m + (1 - beta) * g,       update = sign( sum_m sign(m_m) ).

The momentum lives on each rank, per tensor ``key``, starts at zero and is kept in float32;
only its signs travel (allgather of packed bits, as in :mod:`lab.aggregate.majority_vote`).
"""
from __future__ import annotations

import torch

from ..compress.base import check_finite
from ..argspec import Arg, takes
from .base import LAYERWISE, register
from .majority_vote import MajorityVote


@register("signum")
@takes(beta=Arg(float, ge=0, lt=1, help="momentum of the signs' input"), layerwise=LAYERWISE)
class Signum(MajorityVote):
    name = "signum"

    def __init__(self, comm, beta: float = 0.9, layerwise: bool = False):
        super().__init__(comm, layerwise)
        self.beta = float(beta)
        self.momentum: dict = {}

    def reduce(self, tensor, key, step):
        check_finite(tensor, self.name)  # before it can poison the momentum for good
        m = self.momentum.get(key)
        if m is None or m.shape != tensor.shape:
            m = torch.zeros(tensor.shape, dtype=torch.float32, device=tensor.device)
        m = self.beta * m + (1 - self.beta) * tensor.float()
        self.momentum[key] = m
        return self.vote(m, key).to(tensor.dtype)
