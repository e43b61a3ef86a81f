"""``python -m lab bench p3 [--quick] [--json]``: the schedules of Part 7, measured.

1. ``schedule_table``: time per step of every schedule (sync, fifo, the two ablations, p3) for
   the VGG-like and the ResNet-like model, 2 and 4 ranks, four emulated links, measured and
   predicted (:func:`lab.schedule.plan.predict` on per-layer times measured in the same run),
   with both speedups over ``sync``, their ratio, and the final loss against ``sync``'s.
2. ``engine_cost``: the overlap engine's own cost with no emulated network (target:
   ``fifo``/``p3`` within 5% of ``sync``): on 1 rank (no collectives: hooks, thread and waits
   only) and on 2 ranks over loopback (plus gloo's real cost per extra collective), with one
   exchange on the wire at a time and with 8 in flight.
3. ``ddp_hook``: a DDP step with ``lab.hooks.codec_hook`` (fp16) against torch's own
   ``fp16_compress_hook`` on the same model (target: <= 1.05x).
4. ``ps_table`` (``--ps``): P3 on parameter servers (``sync="p3-ps"``) against ``bsp`` on one
   server and the sliced, sharded FIFO baseline, 4 ranks (1 server + 3 workers, 2 + 2).

``--layers FILE`` instead records each model's per-layer compute profile (``layer_profile``),
with the command, machine and date that measured it: Part 7 checks the paper's claims on the
prediction made from a stored profile, so a check does not move with the machine that runs it.
"""
from __future__ import annotations

import argparse
import datetime
import json
import time

import numpy as np
import torch

from ..runtime import launch
from ..schedule import plan
from ..train import TrainConfig, train_many
from .table import machine, print_rows

SCHEDULES = ("sync", "fifo", "slicing-only", "priority-only", "p3")
NETWORKS = ("100Mbps,0.1ms", "300Mbps,0.1ms", "1Gbps,0.1ms", "3Gbps,0.1ms")
MODELS = {"vgg": {"channels": 16, "fc": 512}, "resnet": {"channels": 32, "blocks": 2}}


def config(model: str, schedule: str, network, steps: int, batch_size: int = 256,
           **kw) -> TrainConfig:
    """The config the benchmark and the book use: digits, global batch 256, SGD with momentum."""
    sk = {"slice_size": kw.pop("slice_size")} if "slice_size" in kw else {}
    return TrainConfig(model=model, data="digits", steps=steps, batch_size=batch_size, lr=0.05,
                       momentum=0.9, model_kw=dict(MODELS.get(model, {})), network=network,
                       schedule=schedule, schedule_kw=sk, eval_every=0, **kw)


def step_ms(h, warmup: int = 2) -> float:
    """Median measured step time (compute + exposed communication) after ``warmup`` steps."""
    return 1e3 * float(np.median(h.step_s[warmup:]))


def bound(sync_h, warmup: int = 2) -> float:
    """Alpha-beta bound on the speedup of perfect overlap: (C + T) / max(C, T), with C the
    measured compute and T the modeled exchange time of ``sync`` (median per step)."""
    c = float(np.median(np.asarray(sync_h.compute_s[warmup:]) + np.asarray(sync_h.codec_s[warmup:])))
    t = float(np.median(sync_h.modeled_comm_s[warmup:]))
    return (c + t) / max(c, t)


def layer_sizes(model: str) -> list[int]:
    """Values per layer of the benchmark's ``model``, in traced forward order (the engine's)."""
    from .. import data as data_mod, models
    from ..schedule.overlap import traced_layers
    d = data_mod.load("digits")
    m = models.make(model, d, **MODELS.get(model, {}))
    layers, _ = traced_layers(m, d.batch(0, 8, 0, 1)[0])
    return [sum(p.numel() for p in ps) for _, ps in layers]


#: Schedules that cut the same units and differ only in the order and timing they send them:
#: beside each, the one to compare its final parameters with.
SAME_SLICES = {"p3": "slicing-only", "priority-only": "fifo"}


def schedule_table(models=("vgg", "resnet"), networks=NETWORKS, schedules=SCHEDULES,
                   workers=(2, 4), rounds: int = 4, block: int = 3,
                   batch_per_rank: int | None = None, device: str = "cpu") -> list[dict]:
    """Every schedule, model, rank count and link, measured in turns (:func:`turns`: a slow
    phase of a shared machine hits every schedule alike): the step time (see :func:`turns`), the step time
    predicted from per-layer times measured in the same session on as many ranks
    (:func:`lab.schedule.plan.predict`), both speedups over ``sync``, their ratio, the
    ceiling any overlap can reach (``bound``: (C + T) / max(C, T), with T the link's modeled
    time for ``sync``'s allreduce and C the rest of ``sync``'s measured step), the final
    loss's distance from ``sync``'s, the largest final-parameter difference from ``sync``
    and from the schedule with the same slices (:data:`SAME_SLICES`). With two ranks every
    difference is 0; with more, gloo sums a value in an order that depends on how the vector
    it reduces is cut (whole model, slices, the slices one real call carries), so the schedules
    differ by rounding, which training then amplifies step by step: measured on 3 and 4 ranks
    (ResNet-like, 6 steps), 1e-5 from ``sync`` and 1e-8 from the same slices.

    ``batch_per_rank``: the global batch is ``batch_per_rank * ranks`` (weak scaling: each rank
    computes as much at every rank count), instead of the book's fixed 256. ``device``: where
    the ranks compute (``"cuda"``: every rank on the GPUs visible, gloo between them unless each
    rank has its own GPU)."""
    from ..comm import Network
    rows = []
    for w in workers:
        batch = {} if batch_per_rank is None else {"batch_size": batch_per_rank * w}
        for model in models:
            timeline = config(model, "fifo", None, 24, **batch).with_(schedule_kw={"timeline": True})
            fwd, ready = layer_times(train_many([timeline], w, progress=False, device=device)[0])
            sizes = layer_sizes(model)
            cfgs = [config(model, s, n, rounds * block, **batch) for n in networks for s in schedules]
            keys = [(c.network, c.schedule) for c in cfgs]
            ref = [keys.index((c.network, SAME_SLICES.get(c.schedule, c.schedule)))
                   if (c.network, SAME_SLICES.get(c.schedule)) in keys else i
                   for i, c in enumerate(cfgs)]
            got = dict(zip(keys, turns(cfgs, w, rounds, block, timeout=300 + 20 * len(cfgs), ref=ref,
                                       device=device)))
            for n in networks:
                pred = {s: 1e3 * plan.predict(sizes, fwd, ready, s, n, w) for s in schedules}
                base, loss = got[n, "sync"]["ms"], got[n, "sync"]["loss"][-1]
                t = 1e3 * Network.parse(n).time("allreduce", 4 * sum(sizes), w)
                for s in schedules:
                    sp, psp = base / got[n, s]["ms"], pred["sync"] / pred[s]
                    rows.append({"model": model, "ranks": w, "device": device,
                             "batch": cfgs[0].batch_size, "link": n,
                                 "schedule": s,
                                 "ms/step": round(got[n, s]["ms"], 1), "predicted ms": round(pred[s], 1),
                                 "speedup": round(sp, 3), "predicted speedup": round(psp, 3),
                                 "measured/predicted": round(sp / psp, 3),
                                 "bound": round(base / max(base - t, t), 3),
                                 "loss - sync": float(f"{got[n, s]['loss'][-1] - loss:.2g}"),
                                 "param diff": float(f"{got[n, s]['param_diff']:.2g}"),
                                 "diff, same slices": float(f"{got[n, s]['ref_diff']:.2g}")})
    return rows


def _turns_rank(ctx, cfgs, rounds: int, block: int):
    from .. import schedule
    from ..comm import Collective, CommLedger
    from ..train.loop import engine
    runs = []
    for cfg in cfgs:
        comm = Collective(ledger=CommLedger(), network=cfg.network_at(0))
        e = engine(ctx, cfg, comm)
        runs.append((cfg, comm, e, schedule.make(cfg.schedule, e, **cfg.schedule_kw), [], []))
    try:
        for r in range(rounds):
            for cfg, comm, e, s, times, losses in runs:
                for k in range(block):
                    step = r * block + k
                    comm.ledger.step = step
                    x, y = e.data.batch(step, cfg.batch_size, ctx.rank, ctx.world_size, cfg.seed)
                    x, y = x.to(ctx.device), y.to(ctx.device)
                    t0 = time.perf_counter()
                    res = s.step(step, x, y)
                    times.append(time.perf_counter() - t0)
                    losses.append(res.loss)
                if hasattr(s, "drain"):   # its exchange must not run into the next schedule's turn
                    s.drain()
    finally:
        for run in runs:
            run[3].close()
    return [{"step_s": times, "loss": losses,
             "bytes": sum(r.bytes for r in comm.ledger.records if r.tag != "plan"),
             "params": torch.cat([p.detach().reshape(-1) for p in e.params])}
            for _, comm, e, _, times, losses in runs]


def turns(cfgs, workers: int, rounds: int = 4, block: int = 3, timeout: float = 600,
          ref=None, device: str = "cpu") -> list[dict]:
    """Run ``cfgs`` on the same ``workers`` ranks *in turns*: ``block`` steps of each, round
    after round, so a slow phase of a shared machine hits every schedule alike (the way
    ``ddp_hook`` times two hooks). Per config: ``ms``, the median over rounds of each turn's
    mean steady step (the first step of each turn is left out: it starts with nothing in flight;
    a turn's mean, not single steps, because an overlapping schedule's step can borrow time
    from the step before it), ``median_ms`` over all steady steps, every step's seconds, the losses, the
    training bytes rank 0 sent (not the overlap engine's one-off plan exchange), and the largest difference of its final parameters from the first
    config's over all ranks (``param_diff``; ``ref_diff``: from config ``ref[i]``'s, by default
    the first's too). Every config needs ``steps = rounds * block``."""
    if isinstance(block, bool) or not isinstance(block, int) or block < 2:
        raise ValueError(f"turns: block must be an int >= 2 (steps per turn), got {block!r}")
    for c in cfgs:
        c.check_workers(workers)
        if c.steps != rounds * block:
            raise ValueError(f"turns: each config needs steps = rounds * block = {rounds * block}, "
                             f"got {c.steps} ({c.name})")
    res = launch(_turns_rank, workers, list(cfgs), rounds, block, timeout=timeout, device=device)
    out = []
    for i in range(len(cfgs)):
        r0 = res[0][i]
        steady = [t for j, t in enumerate(r0["step_s"]) if j % block]
        turn = [float(np.mean(steady[k:k + block - 1])) for k in range(0, len(steady), block - 1)]
        diff = max(float((r[i]["params"] - r[0]["params"]).abs().max()) for r in res)
        j = 0 if ref is None else ref[i]
        same = max(float((r[i]["params"] - r[j]["params"]).abs().max()) for r in res)
        out.append({"ms": 1e3 * float(np.median(turn)), "median_ms": 1e3 * float(np.median(steady)),
                    "step_s": r0["step_s"],
                    "loss": r0["loss"], "bytes": r0["bytes"], "param_diff": diff, "ref_diff": same})
    return out


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


def layer_profile(models=("vgg", "resnet"), steps: int = 40, repeats: int = 3) -> dict:
    """Each model's per-layer forward times and ready offsets (``layer_times``), one rank's
    compute timed in 2 processes (a spare core each for the communication thread), with the
    batch of Part 7; the median over ``repeats`` runs interleaved model by model."""
    cfgs = [config(m, "fifo", None, steps).with_(schedule_kw={"timeline": True})
            for _ in range(repeats) for m in models]
    hs = train_many(cfgs, 2, timeout=120 + 20 * len(cfgs), progress=False)
    out = {}
    for m in models:
        got = [layer_times(h) for h, c in zip(hs, cfgs) if c.model == m]
        out[m] = {"fwd_s": np.median([g[0] for g in got], axis=0).round(7).tolist(),
                  "ready_s": np.median([g[1] for g in got], axis=0).round(7).tolist()}
    return {"machine": machine(), "torch": torch.__version__,
            "date": datetime.date.today().isoformat(), "steps": steps, "repeats": repeats,
            "models": out}


PS_NETWORKS = NETWORKS[:3]
#: label -> (servers, sync mode, sync_kw) of the parameter-server table
PS_RUNS = {"bsp": (1, "bsp", {}),
           "sharded fifo": (1, "p3-ps", {"priority": False}),
           "p3-ps": (1, "p3-ps", {"priority": True}),
           "sharded fifo, 2 servers": (2, "p3-ps", {"servers": 2, "priority": False}),
           "p3-ps, 2 servers": (2, "p3-ps", {"servers": 2, "priority": True})}


def ps_table(model: str = "vgg", networks=PS_NETWORKS, ranks: int = 4, steps: int = 8,
             rounds: int = 2, warmup: int = 2) -> list[dict]:
    """P3 on parameter servers (:mod:`lab.sync.p3_server`) against ``bsp`` on one server, on
    ``ranks`` ranks: per link and scheme, the median measured step time (the workers' compute
    plus exposed waits; ``bsp``: the server's time per ``n`` gradients) over the steps after
    ``warmup`` of ``rounds`` runs taken in turns, the speedup over ``bsp``, p3-ps's speedup over
    the sharded FIFO baseline with as many servers, and the final loss's distance from
    ``bsp``'s (2 servers leave 2 workers, whose shards sum the batch in another order)."""
    cfgs = [((n, label), config(model, "sync", n, steps).with_(sync=sync, sync_kw=kw))
            for _ in range(rounds) for n in networks for label, (_, sync, kw) in PS_RUNS.items()]
    hs = train_many([c for _, c in cfgs], ranks, timeout=120 + 60 * len(cfgs), progress=False)
    times, loss = {}, {}
    for (key, _), h in zip(cfgs, hs):
        times.setdefault(key, []).extend(h.step_s[warmup:])
        loss.setdefault(key, h.loss[-1])
    rows = []
    for n in networks:
        ms = {label: 1e3 * float(np.median(times[n, label])) for label in PS_RUNS}
        for label, (servers, _, _) in PS_RUNS.items():
            fifo = label.replace("p3-ps", "sharded fifo")
            rows.append({"link": n, "scheme": label, "servers": servers, "workers": ranks - servers,
                         "ms/step": round(ms[label], 1), "speedup": round(ms["bsp"] / ms[label], 3),
                         "x fifo": round(ms[fifo] / ms[label], 3) if fifo != label else None,
                         "loss - bsp": float(f"{loss[n, label] - loss[n, 'bsp']:.2g}")})
    return rows


ENGINE_RUNS = {"sync": ("sync", {}), "fifo": ("fifo", {}), "p3": ("p3", {}),
               "fifo, 8 in flight": ("fifo", {"in_flight": 8}),
               "p3, 8 in flight": ("p3", {"in_flight": 8})}


def engine_cost(steps: int = 30, repeats: int = 3) -> list[dict]:
    """The engine's hooks, thread and per-layer waits against ``sync``, with no emulated link:
    on 1 rank (an infinitely fast network: no collective at all) and on 2 ranks over loopback
    (where each extra collective also pays gloo's real per-call cost, less when several are
    in flight)."""
    rows = []
    for workers in (1, 2):
        cfgs = [(name, config("vgg", s, None, steps).with_(schedule_kw=kw))
                for _ in range(repeats) for name, (s, kw) in ENGINE_RUNS.items()]
        hs = train_many([c for _, c in cfgs], workers, timeout=300 + 60 * repeats, progress=False)
        best = {name: min(step_ms(h, 5) for h, (n, _) in zip(hs, cfgs) if n == name)
                for name in ENGINE_RUNS}
        rows += [{"ranks": workers, "schedule": name, "ms/step": round(best[name], 2),
                  "x sync": round(best[name] / best["sync"], 3)} for name in ENGINE_RUNS]
    return rows


def _ddp_worker(ctx, steps: int):
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import fp16_compress_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    from .. import compress, data as data_mod, models
    from ..hooks import CodecHookState, codec_hook
    d = data_mod.load("digits")
    lossf = models.loss_fn(d.task)
    runs = {}
    for name in ("torch fp16_compress_hook", "lab codec_hook fp16"):
        model = models.make("vgg", d, seed=0, **MODELS["vgg"])
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
    return [{"hook": k, "ms/step": round(1e3 * v, 2), "x torch": round(v / ref, 3)} for k, v in t.items()]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab bench p3", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer steps")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.add_argument("--workers", type=int, nargs="+", default=[2, 4],
                   help="rank counts for the schedule table (default: 2 4)")
    p.add_argument("--rounds", type=int, default=4,
                   help="rounds of turns in the schedule table, 3 steps of each schedule per round "
                        "(default 4)")
    p.add_argument("--only", choices=["schedules"], help="only the schedule table")
    p.add_argument("--batch-per-rank", type=int, default=None,
                   help="schedule table: global batch = this x ranks (weak scaling) instead of "
                        "the book's fixed 256")
    p.add_argument("--models", nargs="+", choices=sorted(MODELS), default=list(MODELS),
                   help="schedule table: models (default: vgg resnet)")
    p.add_argument("--networks", nargs="+", default=list(NETWORKS),
                   help="schedule table: emulated links (default: 100Mbps..3Gbps at 0.1 ms)")
    p.add_argument("--ps", action="store_true",
                   help="only the parameter-server table: bsp on one server vs the sharded FIFO "
                        "baseline vs p3-ps (sync='p3-ps'), VGG-like, 4 ranks")
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
    if a.ps:
        rows = ps_table(steps=6 if a.quick else 8, rounds=1 if a.quick else 2)
        if a.json:
            print(json.dumps({"ps": rows, "machine": machine()}, indent=1))
        else:
            print_rows(rows, "P3 on parameter servers: step time by scheme (VGG-like, 4 ranks, "
                             "emulated links)")
        return 0
    schedules = tuple(["sync"] + [s for s in a.schedules if s != "sync"])
    out = {"schedules": schedule_table(tuple(a.models), tuple(a.networks), schedules,
                                       workers=tuple(a.workers), rounds=2 if a.quick else a.rounds,
                                       batch_per_rank=a.batch_per_rank, device=a.device)}
    if a.only is None:
        out["engine_cost"] = engine_cost(steps=15 if a.quick else 30, repeats=2 if a.quick else 3)
        out["ddp_hook"] = ddp_hook(steps=15 if a.quick else 30)
    if a.json:
        print(json.dumps(out, indent=1))
        return 0
    print_rows(out["schedules"], "step time by schedule, measured and predicted (emulated links)")
    if a.only is None:
        print_rows(out["engine_cost"], "overlap engine cost, no emulated link (1 rank: engine only; 2 ranks: loopback)")
        print_rows(out["ddp_hook"], "DDP step, fp16 hook (2 ranks, VGG-like)")
    return 0
