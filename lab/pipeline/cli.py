"""``python -m lab pipeline``: pipeline-parallel training on a (replica, stage) mesh.

    python -m lab pipeline --model gpt --data text --stages 4 --schedule gpipe
    python -m lab pipeline --stages 2 --replicas 2 --schedule async-nesterov \\
        --dp sparse-avg --dp-kw fraction=0.05 delay=4 ema=0.9 --network '100Mbps,2ms'
    python -m lab pipeline --stages 2 --replicas 2 --schedule async-nesterov --weight-decay 0.01 \
        --clip 10 --lr-schedule cosine --warmup 8 --dp sparse-avg --dp-network '10Mbps,50ms'
"""
from __future__ import annotations

import argparse
import pathlib
import sys

from .config import DP_MODES, OPTIMIZERS, SCHEDULES, PipelineConfig
from .lr import LR_SCHEDULES


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m lab pipeline", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="gpt")
    p.add_argument("--data", default="text")
    p.add_argument("--stages", type=int, default=4)
    p.add_argument("--replicas", type=int, default=1)
    p.add_argument("--schedule", default="gpipe", choices=SCHEDULES)
    p.add_argument("--schedule-kw", nargs="*", metavar="K=V", help="async-nesterov: momentum, lr_correction")
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--batch-size", type=int, default=32, help="global batch per step")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--optimizer", default="adam", choices=OPTIMIZERS)
    p.add_argument("--momentum", type=float, default=0.0, help="sgd's momentum")
    p.add_argument("--beta1", type=float, default=None, help="Adam family's first moment (default 0.9)")
    p.add_argument("--weight-decay", type=float, default=0.0, help="decoupled for adamw/nadamw/async-nesterov")
    p.add_argument("--clip", type=float, default=None, help="max gradient norm per stage (AsyncPP: 10)")
    p.add_argument("--lr-schedule", default="constant", choices=LR_SCHEDULES, help="cosine: to 0.1 lr at the end")
    p.add_argument("--warmup", type=int, default=0, help="linear warm-up, in updates")
    p.add_argument("--dp", default="none", choices=DP_MODES)
    p.add_argument("--dp-kw", nargs="*", metavar="K=V",
                   help="sparse-avg: fraction, delay, ema (None = off), overlap (False = blocking)")
    p.add_argument("--network", default=None, help="e.g. 1Gbps, '100Mbps,2ms' (both axes)")
    p.add_argument("--dp-network", default=None, help="the replica-axis link, if not --network")
    p.add_argument("--slow-ranks", nargs="*", metavar="RANK=FACTOR")
    p.add_argument("--jitter", type=float, default=0.0)
    p.add_argument("--model-kw", nargs="*", metavar="K=V")
    p.add_argument("--data-kw", nargs="*", metavar="K=V")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--out", default="runs/pipeline", help="folder for history.json/.csv and plot.png")
    return p


def config(a) -> PipelineConfig:
    from ..__main__ import _kv, _slow
    return PipelineConfig(
        model=a.model, data=a.data, stages=a.stages, replicas=a.replicas, schedule=a.schedule,
        schedule_kw=_kv(a.schedule_kw, "--schedule-kw"), microbatches=a.microbatches,
        steps=a.steps, batch_size=a.batch_size, lr=a.lr, optimizer=a.optimizer,
        momentum=a.momentum, beta1=a.beta1, weight_decay=a.weight_decay, clip=a.clip,
        lr_schedule=a.lr_schedule, warmup=a.warmup, dp=a.dp, dp_kw=_kv(a.dp_kw, "--dp-kw"),
        network=a.network, dp_network=a.dp_network,
        slow_ranks=_slow(a.slow_ranks), jitter=a.jitter, model_kw=_kv(a.model_kw, "--model-kw"),
        data_kw=_kv(a.data_kw, "--data-kw"), seed=a.seed)


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    try:
        cfg = config(a)
    except (ValueError, TypeError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from ..train.history import table
    from ..viz import plot_history
    from .loop import train
    hist = train(cfg, timeout=a.timeout)
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    hist.to_json(out / "history.json")
    hist.to_csv(out / "history.csv")
    plot_history([hist], path=out / "plot.png", title=f"{cfg.schedule} on {cfg.stages} stages x {cfg.replicas} replicas")
    print(table([hist]))
    print(stage_table(hist))
    print(f"\nwrote {out / 'history.json'}, {out / 'history.csv'}, {out / 'plot.png'}")
    return 0


def stage_table(hist) -> str:
    """Per stage: compute, idle and send seconds, utilisation, peak activation bytes."""
    from ..textable import format_rows
    rows = []
    for key in sorted(k for k in hist.series if k.startswith("compute/")):
        tag = key.split("/", 1)[1]
        st = hist.series.get(f"staleness/{tag}", [])
        rows.append({"stage": tag, "compute s": round(sum(hist.series[key]), 3),
                     "idle s": round(sum(hist.series[f"idle/{tag}"]), 3),
                     "send s": round(sum(hist.series[f"send/{tag}"]), 3),
                     "utilisation": round(hist.series[f"utilisation/{tag}"], 3),
                     "peak act kB": round(max(hist.series[f"act_peak/{tag}"]) / 1e3, 1),
                     "max staleness": max((t for _, t in st), default=0)})
    return format_rows(rows)
