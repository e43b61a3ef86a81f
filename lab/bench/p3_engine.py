"""Part 7's bench on the overlap engine itself: each model's layer profile, the cost of each of
the engine's suggestions, and lab's DDP hook against PyTorch's.

:func:`layer_profile`: per-layer forward times and ready offsets (``--layers FILE``).
:func:`engine_cost`: each suggestion of the engine switched off alone (:data:`ENGINE_RUNS`),
in turns on one link. :func:`ddp_hook`: a DDP step with ``lab.hooks.codec_hook`` (fp16)
against torch's own ``fp16_compress_hook`` on the same model. Part of
``python -m lab bench p3`` (:mod:`lab.bench.p3`).
"""
from __future__ import annotations

import datetime
import time

import numpy as np
import torch

from ..runtime import launch
from ..train import train_many
from .made import stamp
from .p3_config import MODELS, config, layer_times
from .table import machine
from .turns import turns


def layer_profile(models=tuple(MODELS), steps: int = 40, repeats: int = 3) -> dict:
    """Each model's per-layer forward times and ready offsets (``layer_times``), one rank's
    compute timed in 2 processes (a spare core each for the communication thread), with the
    batch of Part 7; the median over ``repeats`` runs interleaved model by model."""
    cfgs = [(m, config(m, "fifo", None, steps).with_(schedule_kw={"timeline": True}))
            for _ in range(repeats) for m in models]
    hs = train_many([c for _, c in cfgs], 2, timeout=120 + 20 * len(cfgs), progress=False)
    out = {}
    for m in models:
        got = [layer_times(h) for h, (name, _) in zip(hs, cfgs) if name == m]
        out[m] = {"fwd_s": np.median([g[0] for g in got], axis=0).round(7).tolist(),
                  "ready_s": np.median([g[1] for g in got], axis=0).round(7).tolist()}
    return {"machine": machine(), "torch": torch.__version__,
            "date": datetime.date.today().isoformat(), "steps": steps, "repeats": repeats,
            "models": out}


#: the engine's suggestions (issue 39), each switched off alone against the default
ENGINE_RUNS = {"sync": ("sync", {}), "sync, own arrival": ("sync", {"arrival": "own"}),
               "fifo": ("fifo", {}), "p3": ("p3", {}),
               "p3, one call a step": ("p3", {"calls": "step"}),
               "p3, one in flight": ("p3", {"in_flight": 1}),
               "p3, normal priority": ("p3", {"realtime": False}),
               "p3, no flat buffer": ("p3", {"flat": False}),
               "p3, own arrival": ("p3", {"arrival": "own"})}


def engine_cost(network: str = "1Gbps,0.1ms", workers: int = 2, rounds: int = 6,
                block: int = 4, model: str = "vgg") -> list[dict]:
    """Each suggestion of the engine switched off alone, in turns on one link: the step, the
    compute (the step less its waits) against ``sync``'s, and how long after the last rank's
    end of backward layer 0 is back (median and 90th percentile; ``p3, one call a step`` is the
    engine before the head call). Real-time priority, once granted, stays with gloo's threads
    for the rest of the process: ``normal priority`` only leaves the sending thread's."""
    cfgs = [config(model, s, network, rounds * block).with_(
        schedule_kw={**kw, **({"timeline": True} if s != "sync" else {})})
        for s, kw in ENGINE_RUNS.values()]
    got = turns(cfgs, workers, rounds, block, timeout=300 + 30 * len(cfgs))
    lag = {name: g["lags"] for name, g in zip(ENGINE_RUNS, got)}
    ref = got[0]["compute_ms"]
    rows = []
    for (name, _), g in zip(ENGINE_RUNS.items(), got):
        row = {"run": name, "ms/step": round(g["ms"], 1), "compute ms": round(g["compute_ms"], 1),
               "compute x sync": round(g["compute_ms"] / ref, 3)}
        if lag[name]:
            row["layer 0 after backward ms"] = round(1e3 * float(np.median(lag[name])), 2)
            row["p90 ms"] = round(1e3 * float(np.percentile(lag[name], 90)), 2)
        rows.append(row)
    return stamp(rows, "modeled", clock={c: "wall" for c in ("ms/step", "compute ms",
                                                             "layer 0 after backward ms", "p90 ms")})


def _ddp_worker(ctx, steps: int):
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import fp16_compress_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    from .. import compress, data as data_mod, models
    from ..hooks import CodecHookState, codec_hook
    d = data_mod.load("digits")
    lossf = models.loss_fn(d.task)
    runs = {}
    for name in ("torch fp16_compress_hook", "lab codec_hook fp16"):
        model = models.make("vgg", d, seed=0, **MODELS["vgg"][1])
        ddp = DDP(model, bucket_cap_mb=1)
        if name.startswith("torch"):
            ddp.register_comm_hook(None, fp16_compress_hook)
        else:
            ddp.register_comm_hook(CodecHookState(compress.make("fp16")), codec_hook)
        runs[name] = (ddp, torch.optim.SGD(model.parameters(), lr=0.05), [])
    # the two hooks take turns step by step, so a slow phase of a shared machine hits both
    for step in range(steps):
        x, y = d.batch(step, 64, ctx.rank, ctx.world_size)
        for ddp, opt, per in runs.values():
            t0 = time.perf_counter()
            opt.zero_grad()
            lossf(ddp(x), y).backward()
            opt.step()
            per.append(time.perf_counter() - t0)
    return {name: float(np.median(per[3:])) for name, (_, _, per) in runs.items()}


def ddp_hook(workers: int = 2, steps: int = 30) -> list[dict]:
    t = launch(_ddp_worker, workers, steps, timeout=300)[0]
    ref = t["torch fp16_compress_hook"]
    return stamp([{"hook": k, "ms/step": round(1e3 * v, 2), "x torch": round(v / ref, 3)}
                  for k, v in t.items()], "none", clock={"ms/step": "wall"})
