"""``python -m lab bench p3 [--quick] [--json]``: the schedules of Part 7, measured.

1. ``schedule_table``: time per step of ``sync``, ``fifo`` (the paper's baseline: MXNet's
   default KVStore already pushes each layer as backward produces it), the two ablations and
   ``p3``, for the VGG-like model, a conv-heavier VGG-like (``vgg32``: 32 channels) and the
   ResNet-like one, on 2 and 4 ranks and six links from 100 Mb/s to 3 Gb/s (0.1 ms), in
   interleaved turns (:func:`~lab.bench.turns.turns`, median of the rounds): p3/sync and p3/fifo side by side,
   measured and predicted (:func:`lab.schedule.plan.predict` on per-layer times scaled to
   ``sync``'s own compute in the same session), the bound (C+T)/max(C,T), each schedule's
   compute against sync's; on the emulated link (``--link model``) or a kernel link
   (``--link kernel``, :mod:`lab.comm.kernel`, where the machine can make one).
2. ``engine_cost``: the overlap engine's suggestions one by one (flat buffers, slices in flight,
   the head call, real-time priority, timing from the last rank), VGG-like, 2 ranks, 1 Gb/s:
   compute against sync's and how long after the last rank's backward layer 0 is back.
3. ``ddp_hook``: a DDP step with ``lab.hooks.codec_hook`` (fp16) against torch's own
   ``fp16_compress_hook`` on the same model (target: <= 1.05x).
4. ``--ps``: P3 on parameter servers against MXNet's default KVStore on the same servers
   (:func:`lab.bench.ps.p3_table`).

``--layers FILE`` instead records each model's per-layer compute profile (``layer_profile``).
"""
from __future__ import annotations

import datetime
import json
import time

import numpy as np
import torch

from ..runtime import launch
from ..schedule import plan
from ..train import TrainConfig, train_many
from .made import link_of, stamp
from .table import bench_parser, machine, print_rows
from .turns import head_lags, interval_text, order, paired, round_ratios, turns  # noqa: F401

SCHEDULES = ("sync", "fifo", "slicing-only", "priority-only", "p3")
NETWORKS = ("100Mbps,0.1ms", "300Mbps,0.1ms", "600Mbps,0.1ms", "1Gbps,0.1ms", "1.5Gbps,0.1ms",
            "3Gbps,0.1ms")
#: the benchmark's models: name -> (lab.models name, model_kw)
MODELS = {"vgg": ("vgg", {"channels": 16, "fc": 512}),
          "vgg32": ("vgg", {"channels": 32, "fc": 512}),
          "resnet": ("resnet", {"channels": 32, "blocks": 2})}


def config(model: str, schedule: str, network, steps: int, batch_size: int = 256,
           **kw) -> TrainConfig:
    """The config the benchmark and the book use: digits, global batch 256, SGD with momentum;
    ``model`` is a key of :data:`MODELS` (or any model, with its defaults)."""
    sk = {"slice_size": kw.pop("slice_size")} if "slice_size" in kw else {}
    name, mkw = MODELS.get(model, (model, {}))
    return TrainConfig(model=name, data="digits", steps=steps, batch_size=batch_size, lr=0.05,
                       momentum=0.9, model_kw=dict(mkw), network=network,
                       schedule=schedule, schedule_kw=sk, eval_every=0, **kw)


def step_ms(h, warmup: int = 2) -> float:
    """Median measured step time (compute + exposed communication) after ``warmup`` steps."""
    return 1e3 * float(np.median(h.step_s[warmup:]))


def layer_sizes(model: str) -> list[int]:
    """Values per layer of the benchmark's ``model``, in traced forward order (the engine's)."""
    from .. import data as data_mod, models
    from ..schedule.overlap import traced_layers
    d = data_mod.load("digits")
    name, mkw = MODELS.get(model, (model, {}))
    layers, _ = traced_layers(models.make(name, d, **mkw), d.batch(0, 8, 0, 1)[0])
    return [sum(p.numel() for p in ps) for _, ps in layers]


#: Schedules that cut the same units and differ only in the order and timing they send them:
#: beside each, the one to compare its final parameters with.
SAME_SLICES = {"p3": "slicing-only", "priority-only": "fifo"}


def scaled(profile, compute_s: float):
    """Per-layer forward times and ready offsets scaled so that forward plus backward is
    ``compute_s`` (sync's own compute, measured in the same session): the prediction then
    starts from the baseline's compute, not from an overlapping run's."""
    fwd, ready = (np.asarray(v, dtype=float) for v in profile)
    k = compute_s / (fwd.sum() + ready.max())
    return fwd * k, ready * k


def schedule_table(models=tuple(MODELS), networks=NETWORKS, schedules=SCHEDULES,
                   workers=(2, 4), rounds: int = 5, block: int = 3,
                   batch_per_rank: int | None = None, device: str = "cpu",
                   link: str = "model", profiles: dict | None = None,
                   turns_ms: dict | None = None, how: str = "rotate") -> list[dict]:
    """Every schedule, model, rank count and link, measured in turns (:func:`~lab.bench.turns.turns`: a slow
    phase of a shared machine hits every schedule alike): the step time (see :func:`~lab.bench.turns.turns`),
    the step time predicted (:func:`lab.schedule.plan.predict`) from per-layer times measured
    on as many ranks and scaled to ``sync``'s compute in this session (:func:`scaled`), both
    speedups over ``sync`` and over ``fifo`` (the median of the per-round ratios, :func:`~lab.bench.turns.paired`,
    with their interquartile range), their ratio to the prediction, the ceiling any
    overlap can reach (``bound``: (C + T) / max(C, T), with T the link's modeled time for
    ``sync``'s allreduce and C sync's compute), each schedule's compute (its step less its
    waits) against sync's, the final loss's distance from ``sync``'s, and the largest
    final-parameter difference from ``sync`` and from the schedule with the same slices
    (:data:`SAME_SLICES`: 0 with two ranks; with more, gloo sums in an order that depends on how
    the vector it reduces is cut, 1e-5 after a few steps).

    ``batch_per_rank``: the global batch is ``batch_per_rank * ranks`` (weak scaling) instead of
    the book's fixed 256. ``device``: where the ranks compute. ``link="kernel"``: the ranks sit
    on a kernel link (:mod:`lab.comm.kernel`) reshaped to each network in its turn.
    ``profiles``: a dict that receives, per ``(model, ranks)``, the layer sizes and the scaled
    per-layer times the predictions used (to predict other links). ``turns_ms``: a dict that
    receives, per ``(model, ranks, network, schedule)``, the mean steady step of each round's
    turn (:func:`~lab.bench.turns.turns`), in round order, so that a ratio can be taken round by round."""
    from ..comm import Network
    rows = []
    for w in workers:
        batch = {} if batch_per_rank is None else {"batch_size": batch_per_rank * w}
        for model in models:
            timeline = config(model, "fifo", None, 24, **batch).with_(schedule_kw={"timeline": True})
            profile = layer_times(train_many([timeline], w, progress=False, device=device)[0])
            sizes = layer_sizes(model)
            cfgs = [config(model, s, n, rounds * block, link=link, **batch)
                    for n in networks for s in schedules]
            keys = [(c.network, c.schedule) for c in cfgs]
            ref = [keys.index((c.network, SAME_SLICES.get(c.schedule, c.schedule)))
                   if (c.network, SAME_SLICES.get(c.schedule)) in keys else i
                   for i, c in enumerate(cfgs)]
            got = dict(zip(keys, turns(cfgs, w, rounds, block, timeout=300 + 30 * len(cfgs),
                                       ref=ref, device=device, link=link, how=how)))
            c_sync = float(np.median([got[n, "sync"]["compute_ms"] for n in networks])) / 1e3
            fwd, ready = scaled(profile, c_sync)
            if profiles is not None:
                profiles[model, w] = (sizes, fwd, ready)
            if turns_ms is not None:
                turns_ms.update({(model, w, *k): list(v["turns_ms"]) for k, v in got.items()})
            for n in networks:
                pred = {s: 1e3 * plan.predict(sizes, fwd, ready, s, n, w) for s in schedules}
                base, loss = got[n, "sync"]["ms"], got[n, "sync"]["loss"][-1]
                fifo = got.get((n, "fifo"), {}).get("ms")
                t = 1e3 * Network.parse(n).time("allreduce", 4 * sum(sizes), w)
                for s in schedules:
                    ms, psp = got[n, s]["ms"], pred["sync"] / pred[s]
                    sp, sp_lo, sp_hi = paired(got[n, "sync"], got[n, s])
                    xf = paired(got[n, "fifo"], got[n, s]) if fifo else (None,) * 3
                    sp95 = interval_text(round_ratios(got[n, "sync"], got[n, s]))
                    xf95 = interval_text(round_ratios(got[n, "fifo"], got[n, s])) if fifo else None
                    ceiling = (1e3 * c_sync + t) / max(1e3 * c_sync, t)
                    rows.append({
                        "model": model, "ranks": w, "device": device, "batch": cfgs[0].batch_size,
                        "link": n, "link kind": link, "schedule": s,
                        "ms/step": round(ms, 1), "predicted ms": round(pred[s], 1),
                        "speedup": round(sp, 3), "speedup IQR": f"{sp_lo:.2f}-{sp_hi:.2f}",
                        "speedup 95%": sp95,
                        "predicted speedup": round(psp, 3),
                        "x fifo": round(xf[0], 3) if fifo else None,
                        "x fifo IQR": f"{xf[1]:.2f}-{xf[2]:.2f}" if fifo else None,
                        "x fifo 95%": xf95,
                        "x fifo ratios": ([round(x, 4) for x in round_ratios(got[n, "fifo"], got[n, s])]
                                          if fifo else None),
                        "predicted x fifo": round(pred["fifo"] / pred[s], 3) if fifo else None,
                        "measured/predicted": round(sp / psp, 3),
                        "bound": round(ceiling, 3),
                        # no overlap of C and T can beat (C + T) / max(C, T): above it, the
                        # baseline is broken (or the machine's load changed under it)
                        "above bound": bool(sp > ceiling),
                        "compute x sync": round(got[n, s]["compute_ms"] / (1e3 * c_sync), 3),
                        "spread": round(got[n, s]["spread"], 3),
                        "bytes/step": got[n, s]["bytes"] // (rounds * block),
                        "loss - sync": float(f"{got[n, s]['loss'][-1] - loss:.2g}"),
                        "param diff": float(f"{got[n, s]['param_diff']:.2g}"),
                        "diff, same slices": float(f"{got[n, s]['ref_diff']:.2g}")})
    return stamp(rows, lambda r: link_of(r["link"], kernel=link == "kernel"),
                 clock={"ms/step": "wall", "predicted ms": "modeled"}, bytes={"bytes/step": "handed over"})


def aa_control(model: str = "vgg", network: str = "1Gbps,0.1ms", workers: int = 2,
               rounds: int = 25, block: int = 4, schedule: str = "fifo", link: str = "model",
               how: str = "rotate") -> dict:
    """The A/A control of the turns bench: one schedule run as two identical configs in turns,
    which must measure 1.00 within its interval; a systematic departure is a penalty of the
    bench (the order of turns, a switch between runs), which a p3/fifo ratio would carry.
    Returns the per-round ratios (first copy's turn over the second's), their median and
    95% interval, and whether the interval contains 1 and lies within 1 +- 0.05."""
    from ..rules import median_interval
    cfg = config(model, schedule, network, rounds * block)
    a, b = turns([cfg, cfg], workers, rounds, block, timeout=300 + 10 * rounds, link=link, how=how)
    r = round_ratios(a, b)
    med, lo, hi = median_interval(r)
    return stamp([{"model": model, "link": network, "ranks": workers, "schedule": schedule,
                   "rounds": rounds, "order": how, "ratio": round(med, 4), "95% low": round(lo, 4),
                   "95% high": round(hi, 4), "contains 1": bool(lo <= 1 <= hi),
                   "within 0.05": bool(lo >= 0.95 and hi <= 1.05), "ratios": [round(x, 4) for x in r],
                   "ms/step": round(a["ms"], 2)}],
                 link_of(network, kernel=link == "kernel"), clock={"ms/step": "wall"})[0]


def layer_times(h, warmup: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Per-layer forward seconds and gradient-ready offsets (seconds after backward starts) of a
    ``timeline=True`` run: medians over the recorded steps after ``warmup``."""
    cs, rs = [], []
    for ev in h.series["events"][warmup:]:
        fwd = {e[1]: e[-1] for e in ev if e[0] == "fwd"}
        t_b = next(e[-1] for e in ev if e[0] == "backward")
        ready = {e[1]: e[-1] - t_b for e in ev if e[0] == "ready"}
        n = len(fwd)
        cs.append([fwd[i + 1] - fwd[i] for i in range(n - 1)] + [t_b - fwd[n - 1]])
        rs.append([ready[i] for i in range(n)])
    return np.median(cs, axis=0), np.median(rs, axis=0)


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


def load() -> str:
    """The machine's load average (1, 5, 15 minutes) and its cores, for the provenance of a
    measurement on a shared machine."""
    import os
    with open("/proc/loadavg") as f:
        return f"load {' '.join(f.read().split()[:3])} on {os.cpu_count()} cores"


#: --ps-schemes: which of lab.bench.ps.P3_RUNS run (None: all of them)
PS_SCHEMES = {"all": None,
              "main": ("kvstore, 2 servers", "p3-ps, 2 servers", "p3-ps fifo, 2 servers",
                       "p3-ps unsliced, 2 servers"),
              "pair": ("kvstore, 2 servers", "p3-ps, 2 servers"),
              "colocated": ("kvstore, co-located", "p3-ps, co-located")}


def main(argv=None) -> int:
    p = bench_parser("p3", __doc__)
    p.add_argument("--quick", action="store_true", help="fewer rounds and steps")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.add_argument("--workers", type=int, nargs="+", default=[2, 4],
                   help="rank counts for the schedule table (default: 2 4)")
    p.add_argument("--rounds", type=int, default=5,
                   help="rounds of turns in the schedule table, 3 steps of each schedule per round "
                        "(default 5)")
    p.add_argument("--only", choices=["schedules"], help="only the schedule table")
    p.add_argument("--aa", action="store_true",
                   help="only the A/A control: fifo against itself in turns (--models, "
                        "--networks, --workers: the first of each; --rounds; --link)")
    p.add_argument("--order", choices=["rotate", "reverse"], default="rotate",
                   help="the order of turns in each round (lab.bench.p3.order)")
    p.add_argument("--batch-per-rank", type=int, default=None,
                   help="schedule table: global batch = this x ranks (weak scaling) instead of "
                        "the book's fixed 256")
    p.add_argument("--models", nargs="+", choices=sorted(MODELS), default=list(MODELS),
                   help="models (default: vgg vgg32 resnet; --ps: vgg)")
    p.add_argument("--networks", nargs="+", default=list(NETWORKS),
                   help="schedule table: links (default: 100Mbps..3Gbps at 0.1 ms)")
    p.add_argument("--link", choices=["model", "kernel"], default="model",
                   help="schedule table: the emulated link (default) or a kernel link (root)")
    p.add_argument("--ps-rounds", type=int, default=3,
                   help="--ps: rounds, each running every (link, scheme) once (25 for a claim)")
    p.add_argument("--ps-schemes", choices=sorted(PS_SCHEMES), default="all",
                   help="--ps: every scheme of lab.bench.ps.P3_RUNS; main: 2 workers + 2 servers, "
                        "kvstore, p3-ps, slicing alone, priority alone; pair: kvstore and p3-ps "
                        "on 2 servers; colocated: both with every rank a worker and a server")
    p.add_argument("--ps-steps", type=int, default=10,
                   help="--ps: steps per run, the first 3 not measured (default 10)")
    p.add_argument("--ps", action="store_true",
                   help="only the parameter-server table: p3-ps against MXNet's default KVStore "
                        "on as many servers (lab.bench.ps.p3_table)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda", "auto"],
                   help="schedule table: where the ranks compute (default cpu; cuda: every rank "
                        "on the GPUs visible)")
    p.add_argument("--schedules", nargs="+", choices=SCHEDULES, default=list(SCHEDULES),
                   help="schedule table: schedules (default: all five; sync is always run)")
    p.add_argument("--layers", metavar="FILE",
                   help="only record the per-layer compute profile of each model, as JSON")
    a = p.parse_args(argv)
    if a.layers:
        prof = {"command": f"python -m lab bench p3 --layers {a.layers}" + (" --quick" if a.quick else "")}
        prof.update(layer_profile(steps=20 if a.quick else 40))
        with open(a.layers, "w") as f:
            json.dump(prof, f, indent=1)
        print(f"per-layer profile written to {a.layers}")
        return 0
    if min(a.workers) < 1 or a.rounds < 1:
        p.error("--workers and --rounds must be >= 1")
    if a.batch_per_rank is not None and a.batch_per_rank < 1:
        p.error(f"--batch-per-rank must be >= 1, got {a.batch_per_rank}")
    if a.link == "kernel":
        from ..comm import kernel
        if kernel.unavailable():
            p.error(f"--link kernel: {kernel.unavailable()}")
    if a.aa:
        row = aa_control(a.models[0], a.networks[0], a.workers[0], rounds=max(a.rounds, 6),
                         link=a.link, how=a.order)
        if a.json:
            print(json.dumps({"aa": row, "machine": machine(), "load": load(),
                              "command": "python -m lab bench p3 " + " ".join(argv or []),
                              "date": datetime.date.today().isoformat()}, indent=1))
        else:
            print_rows([{k: v for k, v in row.items() if k != "ratios"}],
                       f"A/A control: {row['schedule']} against itself in turns ({load()})")
        return 0
    if a.ps:
        from .ps import P3_NETWORKS, P3_RUNS, p3_table
        if a.ps_steps < 4:
            p.error(f"--ps-steps must be >= 4 (3 warm-up steps and one measured), got {a.ps_steps}")
        nets = P3_NETWORKS if a.networks == list(NETWORKS) else tuple(a.networks)
        models = ["vgg"] if a.models == list(MODELS) else a.models
        runs = {k: P3_RUNS[k] for k in PS_SCHEMES[a.ps_schemes]} if PS_SCHEMES[a.ps_schemes] else P3_RUNS
        rows = p3_table(models, nets, steps=6 if a.quick else a.ps_steps,
                        rounds=1 if a.quick else a.ps_rounds, runs=runs, link=a.link)
        if a.json:
            print(json.dumps({"ps": rows, "command": "python -m lab bench p3 " + " ".join(argv or []),
                              "machine": machine(), "load": load(),
                              "date": datetime.date.today().isoformat()}, indent=1))
        else:
            print_rows([{k: v for k, v in r.items() if k != "ratios"} for r in rows],
                       f"P3 on parameter servers against MXNet's KVStore ({a.link} link; {load()})")
        return 0
    schedules = tuple(["sync"] + [s for s in a.schedules if s != "sync"])
    out = {"schedules": schedule_table(tuple(a.models), tuple(a.networks), schedules,
                                       workers=tuple(a.workers), rounds=3 if a.quick else a.rounds,
                                       batch_per_rank=a.batch_per_rank, device=a.device,
                                       link=a.link, how=a.order)}
    if a.only is None:
        out["engine_cost"] = engine_cost(rounds=3 if a.quick else 6)
        out["ddp_hook"] = ddp_hook(steps=15 if a.quick else 30)
    out["machine"], out["load"] = machine(), load()
    out["command"] = "python -m lab bench p3 " + " ".join(argv or [])
    out["date"] = datetime.date.today().isoformat()
    if a.json:
        print(json.dumps(out, indent=1))
        return 0
    print_rows([{k: v for k, v in r.items() if k != "x fifo ratios"} for r in out["schedules"]],
               f"step time by schedule, measured and predicted ({a.link} link; {out['load']} at the end)")
    if a.only is None:
        print_rows(out["engine_cost"], "the overlap engine's suggestions, each switched off alone "
                                       "(VGG-like, 2 ranks, 1 Gb/s)")
        print_rows(out["ddp_hook"], "DDP step, fp16 hook (2 ranks, VGG-like)")
    return 0
