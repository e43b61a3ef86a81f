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
                       layerwise=a.layerwise, network=a.network, eval_every=a.eval_every,
                       seed=a.seed)


def train_command(a) -> int:
    from .train import table
    from .train.loop import _merge, train, train_rank
    try:
        cfg = _config(a)
    except (ValueError, TypeError) as e:
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
    from . import aggregate, compress, data, models
    from .comm import PRESETS
    print("models:      ", ", ".join(models.names()))
    print("data:        ", ", ".join(data.names()))
    print("compressors: ", ", ".join(compress.names()))
    print("aggregators: ", ", ".join(aggregate.REGISTRY.names()))
    print("networks:    ", ", ".join(f"{k} ({v.label})" for k, v in PRESETS.items()),
          "or e.g. '100Mbps,2ms'")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"]:
        from .bench.__main__ import main as bench_main
        return bench_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m lab", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    _train_parser(sub)
    sub.add_parser("list", help="what can be named in a config")
    sub.add_parser("bench", help="benchmarks: python -m lab bench --help")
    a = parser.parse_args(argv)
    return {"train": train_command, "list": list_command}[a.command](a)


if __name__ == "__main__":
    sys.exit(main())
