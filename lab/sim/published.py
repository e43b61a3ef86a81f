"""Published tables the simulator predicts from the papers' own inputs (issue 52, item 3).

- :func:`dgc_ratio`: Lin et al. (ICLR 2018, Table 3) report DGC's gradient 597x smaller for
  AlexNet and 277x for ResNet-50 at 99.9% sparsity. Here the book's own DGC codec
  (:mod:`lab.compress`, density 0.001, warm-up over) compresses each layer of the paper's
  models, and :func:`lab.compress.wire_bytes`, the ledger's count, gives the payload.
- P3's +25/38/66% over MXNet's KVStore: :func:`lab.sim.ps_sync.speedup_curve`.
"""
from __future__ import annotations

import math

#: Lin et al. 2018, Table 3: model -> (fp32 MB, DGC MB, ratio as printed)
DGC_TABLE = {"alexnet": (232.56, 0.39, 597), "resnet50": (97.49, 0.35, 277)}


def dgc_ratio(model: str, density: float = 0.001) -> dict:
    """fp32 bytes over the DGC payload's bytes, every layer compressed as its own tensor."""
    from .codec import payload_bytes
    from .models import model as shapes_of
    if not 0 < density <= 1:
        raise ValueError(f"density must be in (0, 1], got {density!r}")
    sizes = [math.prod(s) for s in shapes_of(model)[0]]
    kw = tuple(sorted({"density": density, "warmup": False}.items()))
    payload = sum(payload_bytes("dgc", n, kw) for n in sizes)
    dense = 4 * sum(sizes)
    return {"model": model, "fp32_MB": dense / 2 ** 20, "dgc_MB": payload / 2 ** 20,
            "ratio": dense / payload, "bytes_per_kept_value": payload / sum(
                max(1, math.ceil(density * n)) for n in sizes)}
