"""Shared pieces of the averaging schemes: the parameters as one flat vector, averaged over ranks.

Averaging schemes exchange *parameters*, not gradients, and only the parameters: optimizer
state (momentum buffers, Adam moments) stays on each rank, as in PyTorch's
``PostLocalSGDOptimizer``. With momentum, a replica's buffer then remembers its own local path.
"""
from __future__ import annotations

import torch


def flat(params) -> torch.Tensor:
    """A copy of ``params`` laid end to end."""
    return torch.cat([p.detach().reshape(-1) for p in params])


@torch.no_grad()
def load(params, vector: torch.Tensor) -> None:
    """Write ``vector`` (as made by :func:`flat`) back into ``params``."""
    at = 0
    for p in params:
        n = p.numel()
        p.copy_(vector[at:at + n].view_as(p))
        at += n


@torch.no_grad()
def average(engine, tag: str = "params") -> torch.Tensor:
    """Replace every replica by the mean of all replicas (one allreduce of the flat
    parameters, counted in the ledger); returns the mean."""
    v = flat(engine.params)
    if not torch.isfinite(v).all():
        raise FloatingPointError(f"rank {engine.rank}: non-finite parameters before averaging")
    engine.comm.allreduce(v, tag=tag)
    v.div_(engine.world_size)
    load(engine.params, v)
    return v
