"""A lab codec as a PyTorch DDP communication hook.

    ddp = DistributedDataParallel(model)
    state = lab.hooks.CodecHookState(lab.compress.make("qsgd"), error_feedback=True)
    ddp.register_comm_hook(state, lab.hooks.codec_hook)

Each DDP gradient bucket is compressed, exchanged through :class:`lab.comm.Collective` (so the
bytes land in ``state.comm.ledger``), decompressed and averaged, exactly as the ``compressed``
aggregator does for ``lab.train``. Per-bucket state (residuals) is keyed by the bucket's index,
so models with many buckets work (torch's own PowerSGD hook on gloo aborted with several
buckets), and an all-zero bucket stays zero (no division by a zero norm).

For allreduce-compatible codecs (fp32, fp16, shared-seed Random-k, sketches...) the hook only
compresses and *starts* the allreduce (:meth:`lab.aggregate.dense.CompressedExchange.reduce_async`); the future
it returns decompresses and averages when the collective completes, so DDP keeps running the
backward pass while the bucket is on the wire, as with torch's own ``fp16_compress_hook``.
Codecs that need an allgather (Top-k, signs) exchange their payload sizes first and run
synchronously inside the hook (a completed future).
"""
# No ``from __future__ import annotations``: DDP inspects the hook's annotations as objects.
from typing import Optional

import torch
import torch.distributed as dist

from ..aggregate.dense import CompressedExchange
from ..comm import Collective
from ..compress import Compressor, ErrorFeedback


class CodecHookState:
    """What the hook needs: a codec (optionally with error feedback) and a counting Collective."""

    def __init__(self, compressor: Compressor, error_feedback: bool = False,
                 comm: Optional[Collective] = None):
        if not isinstance(compressor, Compressor):
            raise TypeError(f"compressor must be a lab.compress.Compressor, got {compressor!r}")
        if error_feedback:
            compressor = ErrorFeedback(compressor)
        self.comm = comm or Collective()
        self.exchange = CompressedExchange(self.comm, compressor)


def codec_hook(state: CodecHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """The DDP hook: average the bucket's gradient over ranks through the codec, decoded
    straight into the bucket (DDP then has nothing left to copy)."""
    grad = bucket.buffer()
    return state.exchange.reduce_async(grad, key=bucket.index(), step=-1, out=grad)
