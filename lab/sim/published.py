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


#: Agarwal et al.'s grid as their code runs it (uw-mad-dash/GradCompressionUtility)
AGARWAL = {"models": ("resnet50", "resnet101", "bert-base"), "batches": (16, 32, 64),
           "links_gbps": (1, 2, 4, 8, 20),
           "methods": ("powersgd-4", "powersgd-8", "powersgd-16", "signsgd", "topk-0.1",
                       "topk-0.01", "topk-0.001"),
           "nodes": 16, "per_node": 4, "nvlink": 150e9, "device_flops": 0.5 * 15.7e12,
           "hbm_ratio": 4.8 / 0.9}
#: the codec of the stored GPU report each method's compute is read from
GPU_CODEC = {"signsgd": "sign", "topk-0.1": "topk", "topk-0.01": "topk", "topk-0.001": "topk"}


def gpu_codec_rates(report: dict) -> dict:
    """Codec seconds per value per codec, from a stored GPU report's largest tensors."""
    best: dict = {}
    for r in report["sections"]["codecs"]["rows"]:
        if r.get("device") == "cuda" and "ms" in r and r["elements"] >= best.get(r["codec"], (0, 0))[0]:
            best[r["codec"]] = (r["elements"], r["ms"] / 1e3 / r["elements"])
    return {k: v for k, (_, v) in best.items()}


def agarwal_grid(report: dict, grid: dict = AGARWAL) -> list[dict]:
    """Every setting of the grid: the method's predicted step against fp32 allreduce overlapped
    with backward (``fifo``), on ``nodes`` x ``per_node`` GPUs; codec rates from ``report``
    scaled by ``hbm_ratio`` (the report's GPU to the grid's)."""
    from .models import compute_seconds, model
    from .network import Cluster
    from .step import Config, predict
    rates = gpu_codec_rates(report)
    rows = []
    for name in grid["models"]:
        shapes = tuple(tuple(s) for s in model(name)[0])
        for batch in grid["batches"]:
            comp = compute_seconds(name, batch, grid["device_flops"])
            for gbps in grid["links_gbps"]:
                c = Cluster(grid["nodes"], gbps * 1e9 / 8, 5e-6, grid["per_node"], grid["nvlink"])
                base = predict(Config(shapes, "fifo", c, comp)).step_s
                for m in grid["methods"]:
                    codec = rates[GPU_CODEC[m]] * grid["hbm_ratio"] if m in GPU_CODEC else 0.0
                    step = predict(Config(shapes, m, c, comp, codec)).step_s
                    rows.append({"model": name, "batch": batch, "link_gbps": gbps, "method": m,
                                 "step_s": step, "sync_s": base, "speedup": base / step})
    return rows
