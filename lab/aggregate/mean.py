"""The plain mean, the baseline of the robust rules: one allreduce, then a finiteness check.

It tolerates not even one Byzantine worker (Blanchard et al. 2017, Lemma 1: any linear rule
can be moved anywhere by a single vector). It never averages a NaN silently: a non-finite
result raises FloatingPointError at the step where it happened.
"""
from __future__ import annotations

import torch

from .base import Aggregator, register


@register("mean")
class Mean(Aggregator):
    name = "mean"

    def __init__(self, comm, layerwise: bool = False):
        super().__init__(comm, None, layerwise)

    def reduce(self, tensor, key, step):
        out = tensor.detach().clone()
        self.comm.allreduce(out, tag="grad")
        if not torch.isfinite(out).all():
            raise FloatingPointError(f"step {step}: mean of the gradients is not finite (a rank "
                                     f"sent NaN/Inf); use a robust aggregator to filter it")
        return out.div_(self.comm.world_size)
