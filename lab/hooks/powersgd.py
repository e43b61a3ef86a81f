"""Lab's PowerSGD as a PyTorch DDP communication hook::

    ddp = DistributedDataParallel(model)
    state = lab.hooks.powersgd.PowerSGDHookState(rank=2)
    ddp.register_comm_hook(state, lab.hooks.powersgd.powersgd_hook)

The algorithm is ``lab.aggregate.powersgd.PowerSGD`` (Vogels et al., NeurIPS 2019,
Alg. 1 with error feedback), applied to each DDP bucket's gradients with per-bucket state.
Unlike PyTorch's ``powerSGD_hook`` on CPU/gloo: the exchanges of a bucket run synchronously and
in order inside the hook, so models with many buckets neither abort nor hang with a collective
mismatch; an all-zero gradient stays zero (no 0/0 in the orthogonalization); ``rank=0`` is
refused instead of silently zeroing gradients. A frozen layer is simply absent from the buckets.
Bytes land in ``state.comm.ledger``.
"""
# No ``from __future__ import annotations``: DDP inspects the hook's annotations as objects.
from typing import Optional

import torch
import torch.distributed as dist

from ..aggregate.powersgd import PowerSGD
from ..comm import Collective
from .codec import reattach, without_comm


class PowerSGDHookState:
    """Settings and per-bucket state of the hook (arguments as ``PowerSGD``'s)."""

    def __init__(self, rank: int = 2, warm_start: bool = True, error_feedback: bool = True,
                 min_compression_rate: float = 2.0, start_iter: int = 0, seed: int = 0,
                 comm: Optional[Collective] = None):
        self.comm = comm or Collective()
        self.power = PowerSGD(self.comm, rank=rank, warm_start=warm_start,
                              error_feedback=error_feedback,
                              min_compression_rate=min_compression_rate,
                              start_iter=start_iter, seed=seed)

    def __getstate__(self):
        """Picklable, to be saved with the model's checkpoint (as PyTorch's ``PowerSGDState``):
        settings, per-bucket ``Q`` and error-feedback residuals, the ledger; not the process
        group."""
        return without_comm(self)

    def __setstate__(self, state):
        """Restore, on the default process group (as PyTorch's ``PowerSGDState``)."""
        reattach(self, state)


def powersgd_hook(state: PowerSGDHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """The DDP hook: the bucket's gradients averaged over ranks through PowerSGD."""
    grads = bucket.gradients()
    # DDP rebuilds its buckets after the first step; state is keyed by index and checked by shape
    out = state.power.step(grads, key=bucket.index())
    buffer = bucket.buffer()
    flat = torch.cat([o.reshape(-1) for o in out]).to(buffer.dtype) if out else buffer.clone()
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(flat)
    return fut
