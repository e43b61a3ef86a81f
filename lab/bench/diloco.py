"""``python -m lab bench diloco [--quick] [--json]``: training across data centres, measured.

The bytes-against-loss frontier of the outer-loop methods (DiLoCo, Streaming DiLoCo), DeMo,
local SGD, EASGD and fp32/bf16 allreduce on the digits MLP, 4 workers, the same samples for
every method (``STEPS`` steps of a global batch of ``BATCH``), several seeds, Adam inside
(DeMo: its own sign-momentum rule). Per run: the held-out loss curve, the bytes rank 0 handed
to collectives per step (ledger), hence bytes per sample and the peak of any step. Then one
seed of each on an emulated slow link (``SLOW``): every collective lasts its alpha-beta time
for real, so the wall time is what a 100 Mb/s, 10 ms wide-area link would cost (the model
link); ``--rerun slow_kernel --into FILE`` adds fp32 allreduce and DiLoCo on a kernel link
(``SLOW_KERNEL``, shaped NICs in network namespaces), one seed. AsyncMesh's sparse averaging
(``lab.pipeline``, one stage, 4 replicas, 1/H of the parameters a step: DiLoCo's bytes), scored
on the held-out loss of its replicas' final models.
"""
from __future__ import annotations

import json
import os
import platform
import time

from ..train import TrainConfig, train_many
from .made import link_of, stamp
from .table import bench_parser, machine, print_rows

STEPS, BATCH, H, WORKERS, LR = 300, 64, 20, 4, 3e-3
SLOW = "100Mbps,10ms"
SLOW_KERNEL = "20Mbps,10ms"  # a kernel link: tbf-shaped NICs (--rerun slow_kernel)
SEEDS = (0, 1, 2)


def methods(h: int = H) -> dict[str, dict]:
    """TrainConfig changes per method (over :func:`base`)."""
    sd = {"period": h, "fragments": 4, "tau": 1, "alpha": 0.5, "codec": "qsgd", "codec_bits": 3}
    return {
        "fp32 allreduce": {},
        "bf16 allreduce": {"compressor": "bf16"},
        f"local SGD H={h}": {"averaging": "local", "averaging_kw": {"period": h}},
        f"EASGD tau={h}": {"averaging": "easgd", "averaging_kw": {"period": h}},
        f"DiLoCo H={h}": {"averaging": "diloco", "averaging_kw": {"period": h}},
        f"Streaming DiLoCo H={h} P=4": {"averaging": "streaming_diloco", "averaging_kw": sd},
        "DeMo s=64 k=4": {"aggregator": "demo", "optimizer": "sgd",
                          "aggregator_kw": {"chunk": 64, "k": 4, "beta": 0.999, "sign": True}},
    }


def base(seed: int, steps: int = STEPS, **kw) -> TrainConfig:
    d = dict(model="mlp", data="digits", steps=steps, batch_size=BATCH, lr=LR,
             optimizer="adam", eval_every=max(1, steps // 15), seed=seed)
    d.update(kw)
    return TrainConfig(**d)


def row(name: str, h, seed: int, samples: int) -> dict:
    return {"method": name, "seed": seed, "test loss": h.test_loss[-1],
            "test acc": h.test_acc[-1], "train loss": sum(h.loss[-5:]) / 5, "bytes/sample": sum(h.bytes) / samples,
            "peak bytes/step": max(h.bytes), "wall s": h.wall_s,
            "eval_step": list(h.eval_step), "test_loss": list(h.test_loss),
            "bytes": list(h.bytes)}


def frontier(steps: int = STEPS, seeds=SEEDS, network: str | None = None, model: str = "mlp",
             data: str = "digits") -> list[dict]:
    """Every method of :func:`methods` on ``model``/``data``, one run a method and seed."""
    rows = []
    for seed in seeds:
        ms = methods()
        cfgs = [base(seed, steps, label=n, network=network, model=model, data=data, **kw)
                for n, kw in ms.items()]
        for name, h in zip(ms, train_many(cfgs, WORKERS, progress=False, timeout=900)):
            rows.append(row(name, h, seed, steps * BATCH))
    return stamp(rows, link_of(network), clock={"wall s": "wall"},
                 bytes={"bytes/sample": "handed over", "peak bytes/step": "handed over"})


def sparse_averaging(steps: int = STEPS, seeds=SEEDS, h: int = H) -> list[dict]:
    """AsyncMesh's sparse averaging on the same MLP: one pipeline stage, 4 replicas, a fraction
    1/H of the parameters averaged a step (DiLoCo's bytes). Held-out loss and accuracy of the
    final model are the mean over the replicas' own models (each replica ends with its own
    weights; DiLoCo's rows score rank 0's model, which every worker shares after the last
    outer step)."""
    from ..pipeline import PipelineConfig, train_many as ptrain
    rows = []
    for seed in seeds:
        cfg = PipelineConfig(model="mlp", data="digits", stages=1, replicas=WORKERS,
                             schedule="gpipe", microbatches=1, steps=steps, batch_size=BATCH,
                             lr=LR, optimizer="adam", dp="sparse-avg",
                             dp_kw={"fraction": 1.0 / h}, seed=seed)
        (hist,) = ptrain([cfg], progress=False, timeout=900)
        rows.append({"method": f"sparse averaging 1/{h}", "seed": seed,
                     # the final model's, mean over the 4 replicas (lab.pipeline.heldout)
                     "test loss": hist.test_loss[-1], "test acc": hist.test_acc[-1],
                     "train loss": sum(hist.loss[-5:]) / 5,
                     "bytes/sample": sum(hist.bytes) / (steps * BATCH)})
    return stamp(rows, "none", bytes={"bytes/sample": "handed over"})


def slow_kernel(steps: int = STEPS, seed: int = 0, network: str = SLOW_KERNEL) -> list[dict]:
    """fp32 allreduce and DiLoCo on a *kernel* link (:mod:`lab.comm.kernel`: each rank a
    network namespace, its NIC shaped by tbf to ``network``): the wall time of a real slow
    link, one seed."""
    ms = methods()
    names = ("fp32 allreduce", f"DiLoCo H={H}")
    cfgs = [base(seed, steps, label=n, network=network, link="kernel", **ms[n]) for n in names]
    rows = [{"method": n, "seed": seed, "network": network, "wall s": h.wall_s,
             "test loss": h.test_loss[-1], "bytes/sample": sum(h.bytes) / (steps * BATCH)}
            for n, h in zip(names, train_many(cfgs, WORKERS, progress=False, timeout=900))]
    return stamp(rows, link_of(network, kernel=True), clock={"wall s": "wall"},
                 bytes={"bytes/sample": "handed over"})


RERUNS = {"sparse": ("sparse rows re-run after lab.pipeline gained held-out evaluation",
                     lambda steps, seeds: sparse_averaging(steps, seeds)),
          "slow_kernel": (f"added: fp32 allreduce and DiLoCo on a kernel link shaped to "
                          f"{SLOW_KERNEL}, seed 0 (the other rows unchanged)",
                          lambda steps, seeds: slow_kernel(steps, seeds[0])),
          "frontier_gpt": ("added: the same methods on the tiny GPT (model gpt, data text), the "
                           "other rows unchanged",
                           lambda steps, seeds: [dict(r, model="gpt") for r in
                                                 frontier(steps, seeds, model="gpt", data="text")])}


def rerun(key: str, path: str, steps: int, seeds, quick: bool) -> int:
    """Replace ``key`` of the stored run at ``path`` by a fresh run of those rows only, with its
    provenance under ``provenance[key]``; every other row is left as it was."""
    with open(path) as f:
        out = json.load(f)
    why, fn = RERUNS[key]
    t0, load0 = time.time(), os.getloadavg()
    out[key] = fn(steps, seeds)
    out.pop(f"{key}_error", None)
    out.setdefault("provenance", {})[key] = {
        "command": f"python -m lab bench diloco{' --quick' if quick else ''} --rerun {key} "
                   f"--into {path}",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine(),
        "load": {"wall_s": time.time() - t0, "loadavg_before": load0[0],
                 "loadavg_after": os.getloadavg()[0]}, "note": why}
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print_rows([{k: v for k, v in r.items() if not isinstance(v, (list, dict))}
                for r in out[key]], f"{key}: re-run into {path}")
    return 0


def main(argv=None) -> int:
    p = bench_parser("diloco", __doc__)
    p.add_argument("--quick", action="store_true", help="60 steps, one seed")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--rerun", choices=tuple(RERUNS),
                   help="re-run only these rows and replace their key in --into (a stored run)")
    p.add_argument("--into", help="the stored JSON that --rerun updates in place")
    a = p.parse_args(argv)
    steps, seeds = (60, (0,)) if a.quick else (STEPS, SEEDS)
    if a.rerun or a.into:
        if not (a.rerun and a.into):
            p.error("--rerun and --into go together")
        return rerun(a.rerun, a.into, steps, seeds, a.quick)
    t0 = time.time()
    out = {"command": "python -m lab bench diloco" + (" --quick" if a.quick else "") + " --json",
           "machine": f"{platform.machine()}, {platform.system()}",
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "config": {"steps": steps, "batch": BATCH, "H": H, "workers": WORKERS, "lr": LR,
                      "slow link": SLOW, "model": "mlp", "data": "digits"}}
    out["frontier"] = frontier(steps, seeds)
    slow = frontier(steps, seeds[:1], network=SLOW)
    out["slow"] = stamp([{k: r[k] for k in ("method", "seed", "wall s", "test loss")}
                         for r in slow], "modeled", clock={"wall s": "wall"})
    try:
        out["sparse"] = sparse_averaging(steps, seeds)
    except Exception as err:  # said in the output, never hidden
        out["sparse"], out["sparse_error"] = [], f"{type(err).__name__}: {err}"
    out["load"] = {"wall_s": time.time() - t0}
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        print_rows([{k: v for k, v in r.items() if not isinstance(v, list)}
                    for r in out["frontier"]], "frontier")
        print_rows(out["slow"], f"on the slow link {SLOW}")
        print_rows(out["sparse"], "AsyncMesh sparse averaging") if out["sparse"] else \
            print(out.get("sparse_error"))
    return 0
