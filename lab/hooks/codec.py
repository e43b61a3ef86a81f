"""A lab codec as a PyTorch DDP communication hook.

    ddp = DistributedDataParallel(model)
    state = lab.hooks.CodecHookState(lab.compress.make("qsgd"), error_feedback=True)
    ddp.register_comm_hook(state, lab.hooks.codec_hook)

Each DDP gradient bucket is compressed, exchanged through :class:`lab.comm.Collective` (so the
bytes land in ``state.comm.ledger``), decompressed and averaged, exactly as the ``compressed``
aggregator does for ``lab.train``. Per-bucket state (residuals) is keyed by the bucket's index,
so models with many buckets work (torch's own PowerSGD hook on gloo aborted with several
buckets), and an all-zero bucket stays zero (no division by a zero norm).

The state pickles without its process group (as PyTorch's ``PowerSGDState``), so it can be
saved with the model's checkpoint and passed to ``register_comm_hook`` after loading. A
resumed run matches an uninterrupted one bitwise when each bucket keeps its layout: DDP lays
its buckets out anew after the first step of a *new* DDP object (gradients in the order they
became ready), so a flat per-bucket residual saved from a rebuilt layout meets the initial one
once (PyTorch's own PowerSGD state has the same limit).

For allreduce-compatible codecs (fp32, fp16, shared-seed Random-k, sketches...) the hook only
compresses and *starts* the allreduce (:meth:`lab.aggregate.dense.CompressedExchange.reduce_async`); the future
it returns decompresses and averages when the collective completes, so DDP keeps running the
backward pass while the bucket is on the wire, as with torch's own ``fp16_compress_hook``.
Codecs that need an allgather (Top-k, signs) exchange their payload sizes first and run
synchronously inside the hook (a completed future).
"""
# No ``from __future__ import annotations``: DDP inspects the hook's annotations as objects.
import copy
from typing import Optional

import torch
import torch.distributed as dist

from ..aggregate.dense import CompressedExchange
from ..comm import Collective
from ..compress import Compressor, ErrorFeedback


class CodecHookState:
    """What the hook needs: a codec (optionally with error feedback) and a counting Collective.

    ``compressor``: any :class:`~lab.compress.Compressor`, e.g. ``lab.compress.make("topk")``.
    ``error_feedback``: wrap it in :class:`~lab.compress.ErrorFeedback`, so that what a bucket's
    compression drops is added back the next step. ``comm``: the
    :class:`~lab.comm.Collective` to send through; ``None`` makes a new one on the default
    process group, with a fresh ledger and no emulated link. Pass your own to count the bytes
    in a ledger you already hold or to slow the exchange to a :class:`~lab.comm.Network`.
    Every byte the hook sends is recorded in ``state.comm.ledger``.
    """

    def __init__(self, compressor: Compressor, error_feedback: bool = False,
                 comm: Optional[Collective] = None):
        if not isinstance(compressor, Compressor):
            raise TypeError(f"compressor must be a lab.compress.Compressor, got {compressor!r}")
        if error_feedback:
            compressor = ErrorFeedback(compressor)
        self.comm = comm or Collective()
        self.exchange = CompressedExchange(self.comm, compressor)

    def __getstate__(self):
        """Picklable, to be saved with the model's checkpoint (as PyTorch's ``PowerSGDState``):
        the codec and its state (residuals, generator), the ledger and the network; not the
        process group."""
        return without_comm(self)

    def __setstate__(self, state):
        """Restore, on the default process group (as PyTorch's ``PowerSGDState``)."""
        reattach(self, state)


def without_comm(obj) -> dict:
    """``obj.__dict__`` without its Collective (a process group cannot be pickled): the
    objects that hold it get a copy without it; its ledger and network are kept."""
    d = dict(obj.__dict__)
    comm = d.pop("comm")
    for k, v in d.items():
        if getattr(v, "comm", None) is comm:
            d[k] = copy.copy(v)
            d[k].comm = None
    d["comm_kept"] = {"ledger": comm.ledger, "network": comm.network}
    return d


def reattach(obj, state: dict) -> None:
    """The inverse of :func:`without_comm`: a Collective on the default process group, with
    the kept ledger (byte counts go on) and network, handed to the objects that had one."""
    state = dict(state)
    obj.comm = Collective(**state.pop("comm_kept"))
    for k, v in state.items():
        if hasattr(v, "comm") and v.comm is None:
            v.comm = obj.comm
        setattr(obj, k, v)


def codec_hook(state: CodecHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """The DDP hook: average the bucket's gradient over ranks through the codec, decoded
    straight into the bucket (DDP then has nothing left to copy)."""
    grad = bucket.buffer()
    return state.exchange.reduce_async(grad, key=bucket.index(), step=-1, out=grad)
