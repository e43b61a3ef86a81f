"""``python -m lab bench asyncmesh [--quick] [--json]``: AsyncMesh's data axis, measured.

1. ``overlap``: step time and bytes per step of a 2-stage x 2-replica and a 4 x 2 mesh (the
   tiny GPT, asynchronous pipeline with the look-ahead) on a fast replica-axis link and on a
   slow one, for: no averaging, full averaging (sparse averaging at rho = 1, tau = 0: one
   allreduce a step), a gradient allreduce after every update (m = 2 a step), blocking sparse
   averaging, and non-blocking sparse averaging with tau = 1, 2, 4, 8. Every rank is an
   emulated device (``forward_s``: a forward pass lasts 30 ms, a backward 60), so the ranks
   overlap like separate devices on 2 cores. Target: on the slow link non-blocking sparse
   averaging (tau >= 2) within 1.10x of no averaging; full averaging about twice as slow.
2. ``stragglers``: one replica, or one stage, made 2x slower (``lab.run.straggler``), for the
   synchronous mesh (GPipe + full averaging) and the asynchronous one with blocking and
   non-blocking sparse averaging: throughput, the idle share of the other stage, and how many
   steps the fast replica ran ahead of the slow one (non-blocking: at most tau).
3. ``both_axes``: both axes asynchronous (look-ahead pipeline + non-blocking sparse
   averaging) against GPipe + full averaging, on slow links on both axes, same data.
4. ``lookahead``: the look-ahead isolated (``lab.pipeline.ablation``): AdamW and NAdamW at the
   same beta1 (0.99, and 0.5 and 0.9) with mu_t = beta1, NAdamW with torch's warm-up of mu_t,
   the authors' configuration (stash + recompute) with either, each against its no-delay
   reference (one stage); 200 updates, 3 seeds.
5. ``ema_sweep``: the EMA correction against overwriting and the exact local-progress rule, per
   delay tau, against the fresh (tau = 0) average, full averaging and no averaging.
"""
from __future__ import annotations

import json

import numpy as np

from ..pipeline import PipelineConfig, train_many
from ..pipeline.ablation import AUTHORS, ema_sweep, lookahead
from ..pipeline.report import bytes_per_step, idle_share, lead, tokens_per_s
from .made import stamp
from .table import bench_parser, print_rows

GPT = {"layers": 2, "dim": 32}
FAST, SLOW = "1Gbps,0.5ms", "10Mbps,50ms"
TAUS = (1, 2, 4, 8)
SPARSE = {"fraction": 0.05, "ema": 0.9}


#: seconds of an emulated device's forward pass of one micro-batch (backward: twice that)
DEVICE_S = 0.03


def base(stages: int = 2, replicas: int = 2, steps: int = 16, forward_s: float = DEVICE_S,
         **kw) -> dict:
    """The mesh the benchmark and Part 9 use: tiny GPT, m = 2, global batch 32, every rank an
    emulated device whose forward pass of a micro-batch lasts ``forward_s`` (the real compute,
    a few ms, then a sleep: the ranks run side by side on a 2-core machine, and a busy host
    does not change the times as long as its compute fits in them)."""
    d = dict(model="gpt", data="text", model_kw=dict(GPT), stages=stages, replicas=replicas,
             microbatches=2, steps=steps, batch_size=32, lr=2e-3, schedule="async-nesterov",
             forward_s=forward_s)
    d.update(kw)
    return d


def schemes(taus=TAUS, tau_blocking: int = 4, gradients: bool = False) -> dict[str, dict]:
    """Data-axis schemes by name: (dp, dp_kw). "full averaging" is sparse averaging at rho = 1,
    tau = 0 (one allreduce of every parameter a step); ``gradients`` adds synchronous data
    parallelism's allreduce of the gradients after every update (m of them a step)."""
    out = {"none": dict(dp="none"),
           "full averaging": dict(dp="sparse-avg", dp_kw={"fraction": 1.0, "delay": 0}),
           "sparse blocking": dict(dp="sparse-avg",
                                   dp_kw={**SPARSE, "delay": tau_blocking, "overlap": False})}
    if gradients:
        out["gradient allreduce"] = dict(dp="allreduce")
    for t in taus:
        out[f"sparse tau={t}"] = dict(dp="sparse-avg", dp_kw={**SPARSE, "delay": t})
    return out


def step_s(h, skip: int = 2) -> float:
    """Median measured wall time per step after ``skip`` warm-up steps."""
    return float(np.median(h.step_s[skip:]))


def fastest(cfgs: list, repeats: int = 1, timeout: float = 600) -> list:
    """Run ``cfgs`` ``repeats`` times, interleaved, in one launch; per config the History of
    the repeat with the smallest median step (the one least disturbed by other processes on
    a shared machine; the losses of the repeats are identical, the schedule fixes them)."""
    hs = train_many(list(cfgs) * repeats, progress=False, timeout=timeout)
    n = len(cfgs)
    return [min(hs[i::n], key=step_s) for i in range(n)]


def overlap(meshes=((2, 2), (4, 2)), links=(FAST, SLOW), steps: int = 16, taus=TAUS,
            repeats: int = 1) -> list[dict]:
    rows = []
    for stages, replicas in meshes:
        sch = schemes(taus, gradients=True)
        cfgs = [PipelineConfig(**base(stages, replicas, steps, network=FAST, dp_network=link,
                                      label=name), **kw)
                for link in links for name, kw in sch.items()]
        hs = iter(fastest(cfgs, repeats, timeout=120 + 40 * repeats * len(cfgs)))
        for link in links:
            got = {name: next(hs) for name in sch}
            ref = step_s(got["none"])
            for name, h in got.items():
                waits = [np.mean(h.series[k][2:]) for k in h.series if k.startswith("avg_wait/")]
                rows.append({"mesh": f"{stages}x{replicas}", "replica link": link, "scheme": name,
                             "ms/step": round(1e3 * step_s(h), 1), "x none": round(step_s(h) / ref, 3),
                             "exposed wait ms": round(1e3 * float(np.mean(waits)), 1) if waits else 0.0,
                             "data B/step/replica": round(bytes_per_step(h)["data"] / replicas),
                             "final loss": round(float(np.mean(h.loss[-3:])), 3)})
    return stamp(rows, "modeled", clock={"ms/step": "wall", "exposed wait ms": "wall"},
                 bytes={"data B/step/replica": "handed over"})


STRAGGLER_SCHEMES = {"GPipe + full averaging": dict(schedule="gpipe", dp="allreduce", optimizer="adamw"),
                     "async + sparse blocking": dict(dp="sparse-avg", dp_kw={**SPARSE, "delay": 2,
                                                                            "overlap": False}),
                     "async + sparse non-blocking": dict(dp="sparse-avg", dp_kw={**SPARSE, "delay": 2})}


def straggler_configs(steps: int = 12, factor: float = 2.0,
                      link: str = SLOW) -> dict[tuple, PipelineConfig]:
    """Per (straggler, scheme) on a 2 x 2 mesh: nobody slow, stage 1 of both replicas slow
    (a slow stage), or both stages of replica 1 slow (a slow replica), ``factor`` x."""
    S, R = 2, 2
    slow = {"none": {}, "slow stage": {r * S + 1: factor for r in range(R)},
            "slow replica": {r: factor for r in range(S, 2 * S)}}
    out = {}
    for who, extra in slow.items():
        for name, kw in STRAGGLER_SCHEMES.items():
            b = base(S, R, steps, network=FAST, dp_network=link, slow_ranks=extra,
                     label=f"{name}, {who}")
            out[who, name] = PipelineConfig(**{**b, **kw})
    return out


def straggler_row(who: str, name: str, h) -> dict:
    return {"straggler": who, "scheme": name, "tokens/s": round(tokens_per_s(h, skip=2)),
            "stage 0 idle": round(idle_share(h, "stage0/replica0", skip=2), 2),
            "replica 0 lead (steps)": lead(h, fast=0, slow=1),
            "final loss": round(float(np.mean(h.loss[-3:])), 3)}


def stragglers(steps: int = 16, repeats: int = 1, **kw) -> list[dict]:
    cfgs = straggler_configs(steps, **kw)
    hs = fastest(list(cfgs.values()), repeats, timeout=120 + 40 * repeats * len(cfgs))
    return stamp([straggler_row(who, name, h) for (who, name), h in zip(cfgs, hs)], "modeled",
                 clock={"tokens/s": "wall", "stage 0 idle": "wall"})


def both_axes_configs(steps: int, link: str = SLOW, pp_link: str = SLOW,
                      tau: int = 4, fraction: float = 0.05) -> dict[str, PipelineConfig]:
    """GPipe + AdamW + full averaging against the asynchronous mesh (NAdamW look-ahead at
    0.99 + non-blocking sparse averaging), both with the authors' weight decay, clipping and
    warm-up + cosine schedule, slow links on both axes, the same data and seed."""
    common = dict(network=pp_link, dp_network=link, **AUTHORS)
    sync = base(2, 2, steps, schedule="gpipe", optimizer="adamw", dp="allreduce",
                warmup=max(1, steps // 10), label="sync: gpipe + full averaging", **common)
    asyn = base(2, 2, steps, dp="sparse-avg", label="async: look-ahead + sparse averaging",
                dp_kw={"fraction": fraction, "delay": tau, "ema": 0.9},
                warmup=max(1, steps // 10) * 2, **common)   # the same warm-up in steps (m = 2 updates each)
    return {"sync": PipelineConfig(**sync), "async": PipelineConfig(**asyn)}


def both_axes(steps: int = 40) -> tuple[list[dict], dict]:
    cfgs = both_axes_configs(steps)
    hs = dict(zip(cfgs, train_many(list(cfgs.values()), progress=False, timeout=600)))
    rows = []
    for name, h in hs.items():
        b = bytes_per_step(h)
        rows.append({"run": h.config["name"], "wall s": round(h.wall_s, 2),
                     "ms/step": round(1e3 * step_s(h), 1), "final loss": round(float(np.mean(h.loss[-5:])), 3),
                     "pipeline B/step": round(b["pipeline"]), "data B/step": round(b["data"])})
    rows = stamp(rows, "modeled", clock={"wall s": "wall", "ms/step": "wall"},
                 bytes={"pipeline B/step": "handed over", "data B/step": "handed over"})
    return rows, {k: {"loss": h.loss, "clock": [float(c) for c in h.clock]} for k, h in hs.items()}


def main(argv=None) -> int:
    p = bench_parser("asyncmesh", __doc__)
    p.add_argument("--quick", action="store_true", help="fewer steps, the 2 x 2 mesh only")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.add_argument("--repeats", type=int, default=None,
                   help="runs per timed config, the fastest kept (default 1 with --quick, else 2)")
    a = p.parse_args(argv)
    n = 10 if a.quick else 16
    r = a.repeats or (1 if a.quick else 2)
    out = {"overlap": overlap(meshes=((2, 2),) if a.quick else ((2, 2), (4, 2)), steps=n, repeats=r),
           "stragglers": stragglers(steps=n, repeats=r)}
    out["both_axes"], curves = both_axes(steps=20 if a.quick else 40)
    out["lookahead"] = lookahead(steps=40 if a.quick else 100, seeds=(0,) if a.quick else (0, 1, 2))
    out["ema"] = ema_sweep(steps=20 if a.quick else 30, seeds=(0,) if a.quick else (0, 1))
    if a.json:
        print(json.dumps({**out, "both_axes_curves": curves}, indent=1))
    else:
        print_rows(out["overlap"], f"step time by data-axis scheme (pipeline link {FAST})")
        print_rows(out["stragglers"], f"one component 2x slower, 2 x 2 mesh, replica link {SLOW}")
        print_rows(out["both_axes"], f"both axes asynchronous vs synchronous, links {SLOW}")
        print_rows(out["lookahead"], "the look-ahead against its no-delay reference (beta1 0.99, "
                                     "wd 0.01, clip 10, warm-up + cosine)")
        print_rows(out["ema"], "merging a late average, 4 replicas, 25% a step, non-blocking")
    return 0
