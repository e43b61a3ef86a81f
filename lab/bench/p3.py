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

from .p3_config import (MODELS, NETWORKS, SAME_SLICES, SCHEDULES, config,  # noqa: F401
                        layer_sizes, layer_times, scaled, step_ms)
from .p3_engine import ENGINE_RUNS, _ddp_worker, ddp_hook, engine_cost, layer_profile  # noqa: F401
from .p3_schedules import aa_control, schedule_table
from .table import bench_parser, machine, print_rows
from .turns import head_lags, interval_text, order, paired, round_ratios, turns  # noqa: F401


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
