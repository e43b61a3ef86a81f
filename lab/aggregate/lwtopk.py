"""Layer-wise Top-k: each tensor sparsified on its own, each exchanged by its own allgather.

The layer-wise selection of DGC (Lin et al., ICLR 2018, Sec. 3: a threshold per layer) without
its momentum tricks, as the baseline ``lwtopk/lwtopk_run.py`` of Tyagi & Swany, BigData 2023
(sahiltyagi4/ARTopk, ``LWTopKCompression`` in ``miscellaneous/compression.py``): on each
tensor ``l`` of ``n_l`` entries, with its own error-feedback residual (starting at zero),
``top_{k_l}(g_l + e_l)`` with ``k_l = max(1, round(d n_l))``, so every layer sends at the same
density ``d`` (a global Top-k may give a layer of small gradients nothing); then one allgather
of that layer's values and int32 indices (exactly ``8 k_l`` bytes a rank) per tensor, in the
order of the parameters. A step therefore pays one latency per tensor. The authors' loop runs
three collectives per tensor (a size exchange, then values, then int64 indices); with ``k_l``
known on every rank one packed allgather carries the same information.
"""
from __future__ import annotations

import torch

from ..argspec import takes
from ..compress.base import check_finite
from ..compress.topk import DENSITY, resolve_k, topk_indices
from .base import Aggregator, register


@register("lwtopk")
@takes(density=DENSITY)
class LayerwiseTopK(Aggregator):
    """Per-tensor Top-k with error feedback, one allgather per tensor; ``info()`` gives the
    kept entries per step (``k``, summed over tensors) and the exchanges (``layers``)."""

    name = "lwtopk"

    def __init__(self, comm, density: float = 0.01):
        super().__init__(comm, None, layerwise=True)
        self.density = density
        self.residuals: dict = {}
        self._k: dict = {}

    def reduce(self, tensor, key, step):
        check_finite(tensor, "lwtopk")
        flat = tensor.detach().reshape(-1)
        e = self.residuals.get(key)
        acc = flat.clone() if e is None else flat + e  # residual starts at zero
        k = resolve_k(acc.numel(), self.density)
        idx = topk_indices(acc, k).to(torch.int32)
        total = torch.zeros_like(acc)
        for vals, ids in self.comm.allgather_payload((acc[idx.long()], idx),
                                                     tag=f"lwtopk:{key}", same_size=True):
            total.index_add_(0, ids.long(), vals)
        self.residuals[key] = acc.index_fill(0, idx.long(), 0)
        self._k[key] = k
        return total.div_(self.comm.world_size).view_as(tensor)

    def info(self) -> dict:
        return {"k": sum(self._k.values()), "layers": len(self._k)}
