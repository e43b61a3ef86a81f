"""``python -m lab bench lowrank [--quick] [--json]``: the methods of Part 6, measured.

1. ``methods``: per method, on a real gradient of the CNN and of the VGG-like model (digits,
   2 ranks over gloo): the time of one aggregation (compress, exchange, decompress), the time of
   compress + decompress alone for the codecs, and the bytes per step a rank hands to the wire,
   from the ledger.
2. ``hook``: a DDP step with ``lab.hooks.powersgd`` against torch's ``powerSGD_hook`` on the
   same model, rank and one bucket (where torch's hook works on gloo); target <= 1.1x.
"""
from __future__ import annotations

import json
import statistics
import time

import torch

from ..runtime import launch
from .made import stamp
from .table import bench_parser, print_rows

METHODS = {  # label -> (aggregator, aggregator kwargs, codec, codec kwargs)
    "fp32 allreduce": ("allreduce", {}, None, {}),
    "fp16": ("compressed", {}, "fp16", {}),
    "powersgd r=2": ("powersgd", {"rank": 2}, None, {}),
    "powersgd r=4": ("powersgd", {"rank": 4}, None, {}),
    "atomo svd s=2": ("compressed", {"layerwise": True}, "atomo", {"budget": 2}),
    "atomo coord d=1%": ("compressed", {}, "atomo", {"atoms": "coordinate", "density": 0.01}),
    "countsketch 5x4096": ("compressed", {}, "countsketch", {"width": 4096}),
    "sketchml d=1%": ("compressed", {}, "sketchml", {"density": 0.01}),
    "sketchsgd d=1%": ("sketchsgd", {"density": 0.01}, None, {}),
}
MODELS = {"cnn": {}, "vgg": {"channels": 16, "fc": 512}}


def _gradient(model_name: str, seed: int):
    from .. import data as data_mod, models
    data = data_mod.load("digits", seed=0)
    model = models.make(model_name, data, seed=0, **MODELS[model_name])
    x, y = data.batch(seed, 64)
    models.loss_fn(data.task)(model(x), y).backward()
    return [p.grad.detach().clone() for p in model.parameters()]


def _methods(ctx, model_name: str, repeats: int):
    from .. import aggregate, compress
    from ..comm import Collective
    grads = _gradient(model_name, ctx.rank)
    rows = []
    for label, (agg_name, akw, codec, ckw) in METHODS.items():
        comm = Collective()
        kw = dict(akw)
        if codec:
            kw["compressor"] = compress.make(codec, **ckw)
        agg = aggregate.make(agg_name, comm=comm, **kw)
        agg.aggregate(grads, 0)  # warm-up: hash tables, first Q's
        comm.ledger.clear()
        times = []
        for step in range(repeats):
            t0 = time.perf_counter()
            agg.aggregate(grads, step + 1)
            times.append(time.perf_counter() - t0)
        codec_ms = float("nan")
        if codec:
            c = agg.compressor
            flat = [torch.cat([g.reshape(-1) for g in grads])] if not kw.get("layerwise") else grads
            ct = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                for i, g in enumerate(flat):
                    c.decompress(*c.compress(g, i))
                ct.append(time.perf_counter() - t0)
            codec_ms = 1e3 * statistics.median(ct)
        rows.append({"model": model_name, "method": label,
                     "aggregate_ms": 1e3 * statistics.median(times), "codec_ms": codec_ms,
                     "bytes_per_step": comm.ledger.total_bytes() / repeats})
    return stamp(rows, "none", clock={"aggregate_ms": "wall", "codec_ms": "wall"},
                 bytes={"bytes_per_step": "handed over"})


def methods(repeats: int) -> list[dict]:
    rows = []
    for model_name in MODELS:
        rows += launch(_methods, 2, model_name, repeats, progress=False)[0]
    return rows


def _hook_steps(ctx, which: str, steps: int, rank: int):
    from torch import nn
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as th
    from torch.nn.parallel import DistributedDataParallel as DDP
    from ..hooks.powersgd import PowerSGDHookState, powersgd_hook
    torch.manual_seed(0)
    # on the rank's device: where CUDA is visible, torch's hook synchronizes the CUDA device
    # even for CPU tensors (and fails), so a GPU machine compares the hooks on the GPU
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10)).to(ctx.device)
    ddp = DDP(model, bucket_cap_mb=1000)  # one bucket
    if which == "torch":
        ddp.register_comm_hook(th.PowerSGDState(None, matrix_approximation_rank=rank,
                                                start_powerSGD_iter=2), th.powerSGD_hook)
    else:
        ddp.register_comm_hook(PowerSGDHookState(rank=rank, start_iter=2), powersgd_hook)
    x = torch.randn(128, 256, generator=torch.Generator().manual_seed(ctx.rank)).to(ctx.device)
    times = []
    for _ in range(steps + 3):
        t0 = time.perf_counter()
        model.zero_grad()
        ddp(x).square().mean().backward()
        if x.is_cuda:
            torch.cuda.synchronize(x.device)
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times[3:])


def _hook_both(ctx, steps: int, rank: int):
    out = {}
    for rnd in range(3):  # interleave to share the machine's noise
        for which in ("torch", "lab"):
            out.setdefault(which, []).append(_hook_steps(ctx, which, steps, rank))
    return {k: min(v) for k, v in out.items()}


def hook(steps: int, rank: int = 2) -> dict:
    res = launch(_hook_both, 2, steps, rank, progress=False)[0]
    return stamp([{"torch_ms": res["torch"], "lab_ms": res["lab"], "ratio": res["lab"] / res["torch"]}],
                 "none", clock={"torch_ms": "wall", "lab_ms": "wall"})[0]


def main(argv=None) -> dict:
    ap = bench_parser("lowrank", __doc__)
    ap.add_argument("--quick", action="store_true", help="fewer repeats (CI smoke run)")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = ap.parse_args(argv)
    repeats, steps = (3, 5) if args.quick else (10, 20)
    result = {"methods": methods(repeats), "hook": hook(steps)}
    print_rows(result["methods"], "per method: one aggregation on 2 ranks (gloo)")
    h = result["hook"]
    print(f"\nDDP step, one bucket, rank 2: torch powerSGD_hook {h['torch_ms']:.2f} ms, "
          f"lab {h['lab_ms']:.2f} ms, ratio {h['ratio']:.2f} (target <= 1.1)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
