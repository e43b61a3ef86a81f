"""``python -m lab bench hooks``: lab's DDP communication hooks against PyTorch's own.

One DDP model (an MLP of ``hidden`` units, random data on the ranks' device) is trained in
turns, step by step, with each hook: DDP's default allreduce, PyTorch's ``fp16_compress_hook``
and lab's ``codec_hook`` with the fp16 codec, PyTorch's ``powerSGD_hook`` and lab's
``powersgd_hook`` (Vogels et al., NeurIPS 2019, Alg. 1), both at rank 4 with error feedback and
the same first ``Q``. Per hook: the median step time (forward, backward with the hook, optimizer
step; every GPU call synchronised before the clock stops) and, for lab's hooks, the time over
PyTorch's hook of the same algorithm and the largest difference of the final parameters from
it. With one rank the pairs compute the same numbers and must agree to the last bit (fp16)
or to float rounding (PowerSGD); with more, lab's fp16 averages after the sum and PyTorch's
before it, so they differ by fp16 rounding.

On a GPU machine: ``--world 1 --backend nccl --device cuda``; one GPU cannot host two NCCL
ranks, so more ranks use gloo with CUDA tensors (``--world 2 --backend gloo --device cuda``).
Every hook's bucket is one (``bucket_cap_mb=1000``): PyTorch's PowerSGD hook on gloo aborts with
several buckets, and one bucket makes the pairs compare the same exchange.
"""
from __future__ import annotations

import json
import time

import numpy as np
import torch

from ..runtime import launch
from .made import stamp
from .table import bench_parser, machine, print_rows

HOOKS = ("allreduce (DDP default)", "torch fp16_compress_hook", "lab codec_hook fp16",
         "torch powerSGD_hook", "lab powersgd_hook")
#: lab's hook -> PyTorch's hook of the same algorithm
PAIRS = {"lab codec_hook fp16": "torch fp16_compress_hook",
         "lab powersgd_hook": "torch powerSGD_hook"}
RANK, START, SEED = 4, 2, 7


def _model(hidden: int, device):
    torch.manual_seed(0)  # distinct shapes: torch's PowerSGD hook groups Q's by shape
    return torch.nn.Sequential(torch.nn.Linear(256, hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, hidden + 8), torch.nn.ReLU(),
                               torch.nn.Linear(hidden + 8, 10)).to(device)


def _register(ddp, name: str):
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as tp
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import fp16_compress_hook

    from .. import compress
    from ..hooks import CodecHookState, codec_hook
    from ..hooks.powersgd import PowerSGDHookState, powersgd_hook
    if name == "torch fp16_compress_hook":
        ddp.register_comm_hook(None, fp16_compress_hook)
    elif name == "lab codec_hook fp16":
        ddp.register_comm_hook(CodecHookState(compress.make("fp16")), codec_hook)
    elif name == "torch powerSGD_hook":
        ddp.register_comm_hook(tp.PowerSGDState(
            process_group=None, matrix_approximation_rank=RANK, start_powerSGD_iter=START,
            warm_start=True, use_error_feedback=True, random_seed=SEED), tp.powerSGD_hook)
    elif name == "lab powersgd_hook":  # torch seeds its first Q's from RandomState(seed)
        first = int(np.random.RandomState(SEED).randint(1_000_000_000))
        ddp.register_comm_hook(PowerSGDHookState(rank=RANK, start_iter=START, seed=first),
                               powersgd_hook)


def _worker(ctx, hidden: int, steps: int, batch: int):
    from torch.nn.parallel import DistributedDataParallel as DDP
    dev = ctx.device
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
    runs = {}
    for name in HOOKS:
        model = _model(hidden, dev)
        ddp = DDP(model, bucket_cap_mb=1000, device_ids=[dev.index] if dev.type == "cuda" else None)
        _register(ddp, name)
        runs[name] = (model, ddp, torch.optim.SGD(model.parameters(), lr=0.01), [])
    g = torch.Generator().manual_seed(100 + ctx.rank)
    lossf = torch.nn.functional.cross_entropy
    for _ in range(steps):  # in turns: a slow phase of a shared machine hits every hook alike
        x = torch.randn(batch, 256, generator=g).to(dev)
        y = torch.randint(0, 10, (batch,), generator=g).to(dev)
        for model, ddp, opt, times in runs.values():
            sync()
            t0 = time.perf_counter()
            opt.zero_grad()
            lossf(ddp(x), y).backward()
            opt.step()
            sync()
            times.append(time.perf_counter() - t0)
    params = {n: torch.cat([p.detach().reshape(-1).cpu() for p in m.parameters()])
              for n, (m, _, _, _) in runs.items()}
    warm = min(steps - 1, START + 2)
    out = {n: (float(np.median(t[warm:])), params[n]) for n, (_, _, _, t) in runs.items()}
    return out, ctx.backend, dev.type


def run(world: int = 1, backend: str = "auto", device: str = "auto", hidden: int = 2048,
        steps: int = 20, batch: int = 256, timeout: float = 300) -> list[dict]:
    """One row per hook (module docstring): ``ms/step``, ``x torch`` and ``param diff`` (lab's
    hooks against PyTorch's of the same algorithm; the largest over all ranks)."""
    res = launch(_worker, world, hidden, steps, batch, backend=backend, device=device,
                 timeout=timeout, progress=False)
    (r0, used, dev), res = res[0], [r[0] for r in res]
    rows = []
    for name in HOOKS:
        ms = 1e3 * r0[name][0]
        row = {"hook": name, "ranks": world, "backend": used, "device": dev,
               "params": sum(p.numel() for p in _model(hidden, "cpu").parameters()),
               "ms/step": round(ms, 3)}
        if name in PAIRS:
            ref = PAIRS[name]
            row["x torch"] = round(ms / (1e3 * r0[ref][0]), 3)
            row["param diff"] = float(f"{max(float((r[name][1] - r[ref][1]).abs().max()) for r in res):.3g}")
        rows.append(row)
    return stamp(rows, "none", clock={"ms/step": "wall"})


def main(argv=None) -> int:
    p = bench_parser("hooks", __doc__)
    p.add_argument("--world", type=int, default=2, help="ranks (default 2)")
    p.add_argument("--backend", default="auto", choices=["auto", "gloo", "nccl"],
                   help="process group backend (default auto: NCCL when each rank has a GPU)")
    p.add_argument("--device", default="cpu", choices=["auto", "cpu", "cuda"],
                   help="where the model computes (default cpu)")
    p.add_argument("--hidden", type=int, default=512, help="MLP width (default 512)")
    p.add_argument("--steps", type=int, default=20, help="steps per hook (default 20)")
    p.add_argument("--batch", type=int, default=64, help="batch per rank (default 64)")
    p.add_argument("--quick", action="store_true", help="8 steps, width 128")
    p.add_argument("--json", action="store_true", help="print JSON")
    a = p.parse_args(argv)
    for flag in ("world", "hidden", "steps", "batch"):
        if getattr(a, flag) < 1:
            p.error(f"--{flag} must be >= 1, got {getattr(a, flag)}")
    if a.quick:
        a.steps, a.hidden = 8, 128
    rows = run(a.world, a.backend, a.device, a.hidden, max(a.steps, START + 3), a.batch)
    if a.json:
        print(json.dumps({"hooks": rows, "machine": machine()}, indent=1))
    else:
        print_rows(rows, f"DDP hooks, {a.world} rank(s), {rows[0]['backend']}, {rows[0]['device']}")
    return 0
