"""The baselines: dense allreduce in fp32, and the compressed path for single-round codecs."""
from __future__ import annotations

import torch

from ..argspec import Arg, takes
from ..compress import Compressor
from .base import LAYERWISE, Aggregator, register


@register("allreduce")
class DenseAllreduce(Aggregator):
    """Plain data parallelism: sum the gradient with one allreduce, divide by the world size."""

    name = "allreduce"

    def reduce(self, tensor, key, step):
        out = tensor.detach().clone()
        self.comm.allreduce(out, tag="grad")
        return out.div_(self.comm.world_size)

    def reduce_async(self, tensor, key, step, out=None):
        buf = tensor.detach().clone() if out is None else out.copy_(tensor)
        return self.comm.allreduce_async(buf, tag="grad", then=lambda s: s.div_(self.comm.world_size))


@register("compressed")
@takes(compressor=Arg(Compressor, help="the codec (TrainConfig's compressor)"), layerwise=LAYERWISE)
class CompressedExchange(Aggregator):
    """Compress, exchange, decompress, average.

    Allreduce-compatible codecs (casts, shared-seed Random-k, sketches) sum their payloads
    with an allreduce; the others (Top-k, signs) allgather every rank's payload (ragged sizes
    allowed) and decompress each, so per-rank traffic grows with the number of workers.
    """

    name = "compressed"
    uses_compressor = True

    def __init__(self, comm, compressor=None, layerwise=False):
        super().__init__(comm, compressor, layerwise)

    def reduce(self, tensor, key, step):
        c = self.compressor
        payload, ctx = c.compress(tensor, key)
        if c.allreduce_compatible:
            summed = self.comm.allreduce_payload(payload, tag="grad")
            total = c.decompress(summed, ctx)
        else:
            gathered = self.comm.allgather_payload(payload, tag="grad",
                                                   same_size=c.fixed_size)
            total = torch.zeros_like(tensor)
            for p in gathered:
                total += c.decompress(p, ctx)
        return total.div_(self.comm.world_size)

    def reduce_async(self, tensor, key, step, out=None):
        """Allreduce-compatible codecs: compress now, decompress and average when the sum is
        back (in the collective's own callback when the payload is one tensor). Allgather
        codecs exchange sizes first and run now (:meth:`Aggregator.reduce_async`)."""
        c, comm = self.compressor, self.comm
        if not c.allreduce_compatible:
            return super().reduce_async(tensor, key, step, out)
        payload, ctx = c.compress(tensor, key)
        target = torch.empty_like(tensor) if out is None else out

        def average(summed):
            return c.decompress_into(summed, ctx, target).div_(comm.world_size)
        if len(payload) == 1:
            return comm.allreduce_async(payload[0], tag="grad", then=lambda s: average((s,)))
        parts = [comm.allreduce_async(p, tag="grad") for p in payload]
        return torch.futures.collect_all(parts).then(
            lambda _: average(tuple(f.value() for f in parts)))
