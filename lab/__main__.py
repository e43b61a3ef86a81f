"""``python -m lab``: run experiments from the shell, or under torchrun.

    python -m lab train --model mlp --data digits --workers 4 --steps 200 \\
        --compressor fp16 --network 1Gbps --out runs/fp16
    torchrun --nproc-per-node 4 -m lab train --model mlp --compressor topk --compressor-kw density=0.01
    python -m lab list           # models, data sets, codecs, aggregators, networks
    python -m lab bench launch   # benchmarks (see python -m lab bench --help)
"""
from __future__ import annotations

import argparse
import ast
import os
import pathlib
import sys


def _kv(items: list[str] | None, arg: str) -> dict:
    out = {}
    for item in items or []:
        if "=" not in item:
            raise SystemExit(f"error: {arg} takes key=value pairs, got {item!r}")
        k, v = item.split("=", 1)
        try:
            out[k] = ast.literal_eval(v)
        except (ValueError, SyntaxError):
            out[k] = v
    return out


def _train_parser(sub) -> None:
    p = sub.add_parser("train", help="data-parallel training from flags")
    p.add_argument("--model", default="mlp")
    p.add_argument("--data", default="digits")
    p.add_argument("--workers", type=int, default=2, help="ranks to launch (ignored under torchrun)")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=64, help="global batch")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--optimizer", default="sgd", choices=["sgd", "adam"])
    p.add_argument("--momentum", type=float, default=0.0)
    p.add_argument("--compressor", default="none")
    p.add_argument("--compressor-kw", nargs="*", metavar="K=V")
    p.add_argument("--error-feedback", action="store_true")
    p.add_argument("--aggregator", default="auto")
    p.add_argument("--aggregator-kw", nargs="*", metavar="K=V")
    p.add_argument("--layerwise", action="store_true")
    p.add_argument("--network", default=None, help="e.g. 1Gbps, '100Mbps,2ms', 10gbps")
    p.add_argument("--network-schedule", default=None, metavar="LINK:STEPS ...",
                   help="a network that changes, e.g. '25Gbps,1ms:50 1Gbps,32ms:50'")
    p.add_argument("--schedule", default="sync", help="when gradients move (sync, fifo, p3, ...)")
    p.add_argument("--schedule-kw", nargs="*", metavar="K=V")
    p.add_argument("--averaging", default="none", help="after the step (none, local, easgd, ...)")
    p.add_argument("--averaging-kw", nargs="*", metavar="K=V")
    p.add_argument("--sync", default="allreduce", help="who talks to whom (allreduce, bsp, ssp, ...)")
    p.add_argument("--sync-kw", nargs="*", metavar="K=V")
    p.add_argument("--slow-ranks", nargs="*", metavar="RANK=FACTOR",
                   help="stragglers: rank computes FACTOR times slower, e.g. 1=3.0")
    p.add_argument("--jitter", type=float, default=0.0,
                   help="random extra delay per step and rank, uniform in [0, JITTER] seconds")
    p.add_argument("--byzantine", type=int, default=0, help="how many ranks (the last) attack")
    p.add_argument("--attack", default="none")
    p.add_argument("--attack-kw", nargs="*", metavar="K=V")
    p.add_argument("--model-kw", nargs="*", metavar="K=V")
    p.add_argument("--data-kw", nargs="*", metavar="K=V")
    p.add_argument("--eval-every", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", choices=["cpu", "auto", "cuda"])
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--out", default="runs/latest", help="folder for history.json/.csv and plot.png")


def _config(a):
    from .train import TrainConfig
    return TrainConfig(model=a.model, data=a.data, steps=a.steps, batch_size=a.batch_size, lr=a.lr,
                       optimizer=a.optimizer, momentum=a.momentum, compressor=a.compressor,
                       compressor_kw=_kv(a.compressor_kw, "--compressor-kw"),
                       error_feedback=a.error_feedback, aggregator=a.aggregator,
                       aggregator_kw=_kv(a.aggregator_kw, "--aggregator-kw"),
                       layerwise=a.layerwise or None, network=a.network,
                       network_schedule=a.network_schedule, eval_every=a.eval_every, seed=a.seed,
                       schedule=a.schedule, schedule_kw=_kv(a.schedule_kw, "--schedule-kw"),
                       averaging=a.averaging, averaging_kw=_kv(a.averaging_kw, "--averaging-kw"),
                       sync=a.sync, sync_kw=_kv(a.sync_kw, "--sync-kw"),
                       slow_ranks=_slow(a.slow_ranks), jitter=a.jitter, byzantine=a.byzantine,
                       attack=a.attack, attack_kw=_kv(a.attack_kw, "--attack-kw"),
                       model_kw=_kv(a.model_kw, "--model-kw"), data_kw=_kv(a.data_kw, "--data-kw"))


def _slow(items: list[str] | None) -> dict:
    out = {}
    for k, v in _kv(items, "--slow-ranks").items():
        try:
            out[int(k)] = float(v)
        except (TypeError, ValueError):
            raise ValueError(f"--slow-ranks takes RANK=FACTOR pairs, got {k}={v}") from None
    return out


def train_command(a) -> int:
    from .train import table
    from .train.loop import _merge, train, train_rank
    try:
        cfg = _config(a)
    except (ValueError, TypeError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # under torchrun
        from .runtime import from_env
        import torch.distributed as dist
        ctx = from_env(device=a.device, timeout=a.timeout)
        cfg.check_workers(ctx.world_size)
        mine = train_rank(ctx, cfg)
        per_rank = [None] * ctx.world_size
        dist.all_gather_object(per_rank, mine)  # results to rank 0, outside the ledger
        dist.destroy_process_group()
        if ctx.rank != 0:
            return 0
        hist = _merge(per_rank)
    else:
        try:
            cfg.check_workers(a.workers)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        hist = train(cfg, a.workers, device=a.device, timeout=a.timeout)
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    hist.to_json(out / "history.json")
    hist.to_csv(out / "history.csv")
    from .viz import plot_history
    plot_history([hist], path=out / "plot.png")
    print(table([hist]))
    print(f"\nwrote {out / 'history.json'}, {out / 'history.csv'}, {out / 'plot.png'}")
    return 0


def list_command(_a) -> int:
    from . import aggregate, attack, averaging, compress, data, models, schedule, sync
    from .comm import PRESETS
    print("models:      ", ", ".join(models.names()))
    print("data:        ", ", ".join(data.names()))
    print("compressors: ", ", ".join(compress.names()))
    print("aggregators: ", ", ".join(aggregate.REGISTRY.names()))
    print("schedules:   ", ", ".join(schedule.REGISTRY.names()))
    print("averaging:   ", ", ".join(averaging.REGISTRY.names()))
    print("sync modes:  ", ", ".join(sync.REGISTRY.names()))
    print("attacks:     ", ", ".join(attack.REGISTRY.names()))
    print("networks:    ", ", ".join(f"{k} ({v.label})" for k, v in PRESETS.items()),
          "or e.g. '100Mbps,2ms'")
    return 0


# Commands with their own parser: ``python -m lab NAME ...`` calls ``main(argv)`` of the module.
COMMANDS = {
    "bench": ("lab.bench.__main__", "benchmarks: python -m lab bench --help"),
    "pipeline": ("lab.pipeline.cli", "pipeline-parallel training: python -m lab pipeline --help"),
    "ensemble": ("lab.averaging.ensemble_cli", "train an ensemble on shards, distil it"),
    "hogwild": ("lab.sync.hogwild_cli", "lock-free shared-memory SGD in several processes"),
    "advise": ("lab.advise.cli", "which method to use on a given cluster: python -m lab advise --help"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] and argv[0] in COMMANDS:
        import importlib
        return importlib.import_module(COMMANDS[argv[0]][0]).main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m lab", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    _train_parser(sub)
    sub.add_parser("list", help="what can be named in a config")
    for name, (_, text) in COMMANDS.items():
        sub.add_parser(name, help=text)
    a = parser.parse_args(argv)
    return {"train": train_command, "list": list_command}[a.command](a)


if __name__ == "__main__":
    sys.exit(main())
