"""signSGD with majority vote: every rank sends one bit per coordinate, the vote decides.

Bernstein, Zhao, Azizzadenesheli, Anandkumar, "signSGD with Majority Vote is Communication
Efficient and Fault Tolerant", ICLR 2019 (Algorithm 1, without momentum):

    update = sign( sum_m sign(g_m) )

There is no server here: each rank allgathers the packed sign bits of all ranks (ceil(n/8)
bytes per rank on the wire) and counts the votes itself, so all ranks compute the same
result. ``sign(0) = +1`` when a gradient entry is encoded (:mod:`lab.compress.sign`). A tied
vote (only possible with an even world size) gives 0: no majority, no step on that coordinate
(our choice; it keeps the rule symmetric in + and -).

The result is the update *direction* (entries in {-1, 0, +1}), not an average: it is not
divided by the world size, and the learning rate is the optimizer's business.
"""
from __future__ import annotations

import torch

from ..compress.sign import Sign
from .base import Aggregator, register


@register("majority_vote")
class MajorityVote(Aggregator):
    name = "majority_vote"

    def __init__(self, comm, layerwise: bool = False):
        super().__init__(comm, Sign(), layerwise)

    def vote(self, tensor: torch.Tensor, key) -> torch.Tensor:
        """Allgather this rank's signs of ``tensor``; return sign(sum of votes) in its dtype."""
        payload, ctx = self.compressor.compress(tensor, key)
        votes = torch.zeros(tensor.shape, dtype=torch.float32, device=tensor.device)
        for p in self.comm.allgather_payload(payload, tag="signs", same_size=True):
            votes += self.compressor.decompress(p, (ctx[0], torch.float32, ctx[2]))
        return torch.sign(votes).to(tensor.dtype)

    def reduce(self, tensor, key, step):
        return self.vote(tensor, key)
