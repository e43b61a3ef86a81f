"""The baselines: dense allreduce in fp32, and the compressed path for single-round codecs."""
from __future__ import annotations

import torch

from .base import Aggregator, register


@register("allreduce")
class DenseAllreduce(Aggregator):
    """Plain data parallelism: sum the gradient with one allreduce, divide by the world size."""

    name = "allreduce"

    def reduce(self, tensor, key, step):
        out = tensor.detach().clone()
        self.comm.allreduce(out, tag="grad")
        return out.div_(self.comm.world_size)


@register("compressed")
class CompressedExchange(Aggregator):
    """Compress, exchange, decompress, average.

    Allreduce-compatible codecs (casts, shared-seed Random-k, sketches) sum their payloads
    with an allreduce; the others (Top-k, signs) allgather every rank's payload (ragged sizes
    allowed) and decompress each, so per-rank traffic grows with the number of workers.
    """

    name = "compressed"
    uses_compressor = True

    def __init__(self, comm, compressor=None, layerwise=False):
        if compressor is None:
            raise ValueError("compressed aggregator needs compressor=")
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
