"""``python -m lab pipeline``: pipeline-parallel training on a (replica, stage) mesh.

    python -m lab pipeline --model gpt --data text --stages 4 --schedule gpipe
    python -m lab pipeline --stages 2 --replicas 2 --schedule async-nesterov \\
        --dp sparse-avg --dp-kw fraction=0.05 delay=4 ema=0.9 --network '100Mbps,2ms'
    python -m lab pipeline --stages 2 --replicas 2 --schedule async-nesterov --weight-decay 0.01 \\
        --clip 10 --lr-schedule cosine --warmup 8 --dp sparse-avg --dp-network '10Mbps,50ms'
    python -m lab pipeline --stages 2 --replicas 2 --link kernel --network '100Mbps,1ms' \\
        --dp-network '100Mbps,20ms'     # Linux, root: every rank behind its own shaped NIC
"""
from __future__ import annotations


from .args import integer, key_value, kind_type, number, parser as new_parser, rank_factor
from .formatting import link_type, with_defaults
from .runs import (add_checkpoint_flags, checkpoint_kw, launched, out_refused, refused,
                   summary, unwritten, write_history)

HELP = "pipeline-parallel training: python -m lab pipeline --help"


def parser():
    """The parser of ``python -m lab pipeline``."""
    name = lambda kind: kind_type(kind, "pipeline")  # noqa: E731
    kw = dict(nargs="*", metavar="K=V", type=key_value)
    p = with_defaults(new_parser("python -m lab pipeline", __doc__))
    p.add_argument("--model", default="gpt", type=name("model"), help="a model (python -m lab list)")
    p.add_argument("--data", default="text", type=name("data"), help="a data set")
    p.add_argument("--stages", type=integer(1), default=4, help="pipeline stages (ranks per replica)")
    p.add_argument("--replicas", type=integer(1), default=1, help="copies of the pipeline")
    p.add_argument("--schedule", default="gpipe", type=name("pipeline-schedule"),
                   help="gpipe, 1f1b, async, async-stash or async-nesterov")
    p.add_argument("--schedule-kw", **kw, help="async-nesterov: momentum, lr_correction")
    p.add_argument("--microbatches", type=integer(1), default=4, help="per step and replica")
    p.add_argument("--steps", type=integer(1), default=50, help="optimizer steps")
    p.add_argument("--batch-size", type=integer(1), default=32, help="global batch per step")
    p.add_argument("--lr", type=number(0, lo_open=True), default=1e-3, help="learning rate")
    p.add_argument("--optimizer", default="adam", type=name("pipeline-optimizer"),
                   help="sgd, adam, adamw, nadam or nadamw")
    p.add_argument("--momentum", type=number(0, 1, hi_open=True), default=0.0, help="sgd's momentum")
    p.add_argument("--beta1", type=number(0, 1, hi_open=True), default=None,
                   help="Adam family's first moment (default: 0.9)")
    p.add_argument("--weight-decay", type=number(0), default=0.0,
                   help="decoupled for adamw/nadamw/async-nesterov")
    p.add_argument("--clip", type=number(0, lo_open=True), default=None,
                   help="max gradient norm per stage (AsyncPP: 10; default: no clipping)")
    p.add_argument("--lr-schedule", default="constant", type=name("lr-schedule"),
                   help="constant, or cosine: to 0.1 lr at the end")
    p.add_argument("--warmup", type=integer(0), default=0, help="linear warm-up, in updates")
    p.add_argument("--dp", default="none", type=name("dp"),
                   help="across replicas: none, allreduce (sync) or sparse-avg")
    p.add_argument("--dp-kw", **kw,
                   help="sparse-avg: fraction, delay, ema (None = off), overlap (False = blocking)")
    p.add_argument("--network", default=None, type=link_type("pipeline"),
                   help="e.g. 1Gbps, '100Mbps,2ms' (both axes; default: none, loopback)")
    p.add_argument("--dp-network", default=None, type=link_type("pipeline"),
                   help="the replica-axis link (default: --network's)")
    p.add_argument("--link", default="model", choices=("model", "kernel"),
                   help="model: the network emulated by the alpha-beta model; kernel: each rank "
                        "in a network namespace, its NIC shaped to --network's rate (Linux, root; "
                        "--dp-network may then differ in latency only)")
    p.add_argument("--slow-ranks", nargs="*", metavar="RANK=FACTOR", type=rank_factor,
                   help="stragglers: global rank computes FACTOR times slower, e.g. 1=2.0")
    p.add_argument("--jitter", type=number(0), default=0.0,
                   help="random extra delay per step and rank, uniform in [0, JITTER] seconds")
    p.add_argument("--model-kw", **kw, help="the model's parameters, e.g. layers=2 dim=16")
    p.add_argument("--data-kw", **kw, help="the data set's parameters")
    p.add_argument("--seed", type=int, default=0, help="seed of the model and data")
    p.add_argument("--timeout", type=number(0, lo_open=True), default=600.0,
                   help="seconds without progress before the run counts as hung")
    p.add_argument("--out", default="runs/pipeline", help="folder for history.json/.csv and plot.png")
    add_checkpoint_flags(p)
    return p


def config(a):
    """The ``PipelineConfig`` of parsed flags ``a``."""
    from ..pipeline import PipelineConfig
    return PipelineConfig(
        model=a.model, data=a.data, stages=a.stages, replicas=a.replicas, schedule=a.schedule,
        schedule_kw=dict(a.schedule_kw or ()), microbatches=a.microbatches,
        steps=a.steps, batch_size=a.batch_size, lr=a.lr, optimizer=a.optimizer,
        momentum=a.momentum, beta1=a.beta1, weight_decay=a.weight_decay, clip=a.clip,
        lr_schedule=a.lr_schedule, warmup=a.warmup, dp=a.dp, dp_kw=dict(a.dp_kw or ()),
        network=a.network, dp_network=a.dp_network, link=a.link, slow_ranks=dict(a.slow_ranks or ()),
        jitter=a.jitter, model_kw=dict(a.model_kw or ()), data_kw=dict(a.data_kw or ()),
        seed=a.seed)


def main(argv: list[str] | None = None) -> int:
    """``python -m lab pipeline ARGS``: 0 when the run is written, 1 when it failed (what it
    kept is written), 2 for a bad configuration."""
    a = parser().parse_args(argv)
    try:
        cfg = config(a)
    except (ValueError, TypeError, KeyError) as e:
        return refused(e)
    if out_refused(a.out):
        return 2
    from ..pipeline import train
    hist = launched(lambda: train(cfg, timeout=a.timeout, **checkpoint_kw(a)), a.out)
    if isinstance(hist, int):
        return hist
    try:
        paths = write_history(hist, a.out,
                              f"{cfg.schedule} on {cfg.stages} stages x {cfg.replicas} replicas")
    except OSError as e:
        return unwritten(e, a.out)
    print(summary([hist]))
    print()
    print(stage_table(hist))
    print(f"\nwrote {', '.join(str(p) for p in paths)}")
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
