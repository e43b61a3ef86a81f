"""``python -m lab train``: data-parallel training from flags, or under torchrun.

    python -m lab train --model mlp --data digits --workers 4 --steps 200 \\
        --compressor fp16 --network 1Gbps --out runs/fp16
    python -m lab train --steps 500 --checkpoint-every 50 --out runs/long   # killed? then:
    python -m lab train --steps 500 --checkpoint-every 50 --out runs/long --resume runs/long
    torchrun --nproc-per-node 4 -m lab train --model mlp --compressor topk --compressor-kw density=0.01

A run whose loss grows 1,000-fold over its first, or that is about to sum a non-finite
gradient, stops with an error naming the step and the rank (exit status 1; --keep-diverging
lets it run on). Under torchrun a bad flag or config is said once per node, and each rank
that fails says why in one line, its traceback kept in OUT/error-rankR.json.
"""
from __future__ import annotations

import os

from .args import (integer, key_value, kind_type, network_schedule, number, parser as new_parser,
                   rank_factor)
from .formatting import link_type, with_defaults
from .runs import (add_checkpoint_flags, checkpoint_kw, launched, out_refused, rank_failed,
                   refused, summary, unwritten, write_history)

HELP = "data-parallel training from flags"


def add_arguments(p) -> None:
    """The flags of ``train`` on parser ``p``."""
    name = kind_type
    kw = dict(nargs="*", metavar="K=V", type=key_value)
    p.add_argument("--model", default="mlp", type=name("model"), help="a model (python -m lab list)")
    p.add_argument("--data", default="digits", type=name("data"), help="a data set")
    p.add_argument("--workers", type=integer(1), default=2,
                   help="ranks to launch (ignored under torchrun)")
    p.add_argument("--steps", type=integer(1), default=100, help="optimizer steps")
    p.add_argument("--batch-size", type=integer(1), default=64, help="global batch")
    p.add_argument("--lr", type=number(0, lo_open=True), default=0.1, help="learning rate")
    p.add_argument("--optimizer", default="sgd", type=name("optimizer"), help="sgd or adam")
    p.add_argument("--momentum", type=number(0, 1, hi_open=True), default=0.0,
                   help="SGD momentum")
    p.add_argument("--compressor", default="none", type=name("compressor"),
                   help="the compressor applied to each gradient (python -m lab list)")
    p.add_argument("--compressor-kw", **kw, help="the compressor's parameters, e.g. density=0.01")
    p.add_argument("--error-feedback", action="store_true",
                   help="wrap the compressor in error feedback (the residual is sent later)")
    p.add_argument("--aggregator", default="auto", type=name("aggregator", extra=("auto",)),
                   help="how the gradients are combined (auto: dense allreduce without a "
                        "codec, else 'compressed')")
    p.add_argument("--aggregator-kw", **kw, help="the aggregator's parameters, e.g. rank=2")
    p.add_argument("--layerwise", action="store_true",
                   help="aggregate tensor by tensor, not one flat vector")
    p.add_argument("--network", default=None, type=link_type(),
                   help="an emulated link, e.g. 1Gbps, '100Mbps,2ms', 10gbps (default: none, "
                        "loopback at its own speed)")
    p.add_argument("--network-schedule", default=None, metavar="LINK:STEPS ...",
                   type=network_schedule,
                   help="a network that changes, e.g. '25Gbps,1ms:50 1Gbps,32ms:50'")
    p.add_argument("--link", default="model", choices=("model", "kernel"),
                   help="how the network is made: model (an emulated link that waits out the "
                        "alpha-beta time) or kernel (each rank in a network namespace, its NIC "
                        "shaped by the kernel; Linux, root) (default: model)")
    p.add_argument("--schedule", default="sync", type=name("schedule"),
                   help="when gradients move (sync, fifo, p3, ...)")
    p.add_argument("--schedule-kw", **kw, help="the schedule's parameters, e.g. slice_size=40000")
    p.add_argument("--averaging", default="none", type=name("averaging"),
                   help="after the step (none, local, easgd, ...)")
    p.add_argument("--averaging-kw", **kw, help="the averaging's parameters, e.g. period=8")
    p.add_argument("--sync", default="allreduce", type=name("sync"),
                   help="who talks to whom (allreduce, bsp, ssp, ...)")
    p.add_argument("--sync-kw", **kw, help="the sync mode's parameters, e.g. staleness=3")
    p.add_argument("--slow-ranks", nargs="*", metavar="RANK=FACTOR", type=rank_factor,
                   help="stragglers: rank computes FACTOR times slower, e.g. 1=3.0")
    p.add_argument("--jitter", type=number(0), default=0.0,
                   help="random extra delay per step and rank, uniform in [0, JITTER] seconds")
    p.add_argument("--device-s", type=number(0, 60, lo_open=True), default=None,
                   help="an emulated device: each forward + backward lasts DEVICE_S seconds")
    p.add_argument("--byzantine", type=integer(0), default=0,
                   help="how many ranks (the last) attack")
    p.add_argument("--attack", default="none", type=name("attack"),
                   help="what the byzantine ranks send (alie, ipm, signflip, ...)")
    p.add_argument("--attack-kw", **kw, help="the attack's parameters")
    p.add_argument("--model-kw", **kw, help="the model's parameters, e.g. hidden=128")
    p.add_argument("--data-kw", **kw, help="the data set's parameters")
    p.add_argument("--eval-every", type=integer(0), default=20,
                   help="steps between held-out evaluations (0: only at the end)")
    p.add_argument("--seed", type=int, default=0, help="seed of the model, data and codecs")
    p.add_argument("--device", default="cpu", choices=["cpu", "auto", "cuda"],
                   help="where each rank computes")
    p.add_argument("--timeout", type=number(0, lo_open=True), default=600.0,
                   help="seconds without progress before the run counts as hung")
    p.add_argument("--keep-diverging", action="store_true",
                   help="keep training when the loss grows 1,000-fold over its first, and let a "
                        "non-finite gradient reach the aggregator (default: stop with an error "
                        "naming the step and rank; a non-finite loss always stops the run)")
    p.add_argument("--out", default="runs/latest", help="folder for history.json/.csv and plot.png")
    p.add_argument("--elastic", action="store_true",
                   help="go on with the survivors when a rank other than 0 dies: checkpoints "
                        "every outer step (an averaging with a period: diloco, local, ...) in "
                        "OUT/elastic, resumed on one rank fewer (lab.train.elastic)")
    p.add_argument("--lose-rank", type=integer(1), default=None, metavar="RANK",
                   help="with --elastic: SIGKILL rank RANK after --lose-after (a fault drill)")
    p.add_argument("--lose-after", type=integer(1), default=None, metavar="STEP",
                   help="with --lose-rank: the step whose checkpoint must exist first")
    add_checkpoint_flags(p)


def add_parser(sub):
    """Add ``train`` to the subparsers ``sub`` (returns its parser)."""
    p = sub.add_parser("train", help=HELP)
    add_arguments(p)
    return p


def parser():
    """The parser of ``python -m lab train``."""
    p = with_defaults(new_parser("python -m lab train", __doc__))
    add_arguments(p)
    return p


def config(a):
    """The ``TrainConfig`` of parsed flags ``a`` (it checks what depends on more than one flag)."""
    from ..train import TrainConfig
    return TrainConfig(model=a.model, data=a.data, steps=a.steps, batch_size=a.batch_size, lr=a.lr,
                       optimizer=a.optimizer, momentum=a.momentum, compressor=a.compressor,
                       compressor_kw=dict(a.compressor_kw or ()),
                       error_feedback=a.error_feedback, aggregator=a.aggregator,
                       aggregator_kw=dict(a.aggregator_kw or ()),
                       layerwise=a.layerwise or None, network=a.network,
                       network_schedule=a.network_schedule, link=a.link, eval_every=a.eval_every,
                       seed=a.seed,
                       schedule=a.schedule, schedule_kw=dict(a.schedule_kw or ()),
                       averaging=a.averaging, averaging_kw=dict(a.averaging_kw or ()),
                       sync=a.sync, sync_kw=dict(a.sync_kw or ()),
                       slow_ranks=dict(a.slow_ranks or ()), jitter=a.jitter,
                       device_s=a.device_s, byzantine=a.byzantine, attack=a.attack,
                       attack_kw=dict(a.attack_kw or ()), model_kw=dict(a.model_kw or ()),
                       data_kw=dict(a.data_kw or ()), stop_on_divergence=not a.keep_diverging)


def main(argv: list[str] | None = None) -> int:
    """``python -m lab train ARGS``: 0 when the run is written, 1 when it failed (what it kept
    is written), 2 for a bad configuration or an --out that cannot be written."""
    a = parser().parse_args(argv)
    from ..train import train
    torchrun = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    try:
        cfg = config(a)
        if not torchrun:
            cfg.check_workers(a.workers)
    except (ValueError, TypeError, KeyError) as e:
        return refused(e)
    if out_refused(a.out):
        return 2
    if a.elastic or a.lose_rank is not None or a.lose_after is not None:
        bad = _elastic_refusal(a, torchrun)
        if bad:
            return refused(ValueError(bad))
        hist = launched(lambda: _elastic(cfg, a), a.out)
    elif torchrun:  # a checkpoint of another config, ... is refused by every rank, said once
        hist = launched(lambda: _under_torchrun(cfg, a), a.out)
    else:
        hist = launched(lambda: train(cfg, a.workers, device=a.device, timeout=a.timeout,
                                      **checkpoint_kw(a)), a.out)
    if hist is None:  # a torchrun rank other than 0
        return 0
    if isinstance(hist, int):
        return hist
    try:
        paths = write_history(hist, a.out)
    except OSError as e:
        return unwritten(e, a.out)
    print(summary([hist]))
    print(f"\nwrote {', '.join(str(p) for p in paths)}")
    return 0


def _under_torchrun(cfg, a):
    """This rank's share of the run torchrun started: the merged History on rank 0, else None;
    or an exit status. Errors are as short as without torchrun: a config every rank refuses
    is said by each node's first rank alone (the others exit quietly, status 2), and a rank
    that fails says so in one line (:func:`~lab.cli.runs.rank_failed`: its traceback goes to
    OUT/error-rankR.json); torchrun's own failure summary follows, naming the cause."""
    import torch.distributed as dist
    from ..runtime import from_env
    from ..train import train_rank
    from ..train.loop import _merge
    ctx = from_env(device=a.device, timeout=a.timeout)
    plan, kw = None, checkpoint_kw(a)
    try:
        cfg.check_workers(ctx.world_size)
        if kw:  # every rank reads and writes OUT/checkpoint: across nodes, a shared filesystem
            from ..run import checkpoint
            from ..train import resume
            plan = checkpoint.plan(kw.get("checkpoint_every", 0), kw.get("checkpoint_dir"),
                                   kw.get("resume"), cfg.to_dict(), ctx.world_size, "train")
            resume.check(cfg)
    except ValueError as e:  # the same on every rank: said once per node
        return refused(e)
    try:
        mine = train_rank(ctx, cfg, checkpoint=plan)
    except Exception as e:  # noqa: BLE001 -- any failure of this rank: one line, not a traceback
        return rank_failed(e, ctx.rank, ctx.world_size, a.out)
    per_rank = [None] * ctx.world_size
    dist.all_gather_object(per_rank, mine)  # results to rank 0, outside the ledger
    dist.destroy_process_group()
    return _merge(per_rank) if ctx.rank == 0 else None


def _elastic_refusal(a, torchrun: bool) -> str:
    """Why the --elastic flags cannot run as given ('' if they can)."""
    if not a.elastic:
        return "--lose-rank and --lose-after need --elastic"
    if torchrun:
        return "--elastic re-forms the run itself: launch it without torchrun"
    if (a.lose_rank is None) != (a.lose_after is None):
        return "--lose-rank and --lose-after go together"
    if a.lose_rank is not None and a.lose_rank >= a.workers:
        return f"--lose-rank must be a rank in [1, {a.workers}), got {a.lose_rank}"
    if getattr(a, "checkpoint_every", 0) or getattr(a, "resume", None):
        return "--elastic checkpoints every outer step itself: drop --checkpoint-every/--resume"
    return ""


def _elastic(cfg, a):
    """The elastic run of ``python -m lab train --elastic``: its History, the faults printed."""
    from pathlib import Path

    from ..train.elastic import train_elastic, train_losing_a_worker
    d = Path(a.out) / "elastic"
    kw = dict(device=a.device, timeout=a.timeout)
    if a.lose_rank is not None:
        hist, ev = train_losing_a_worker(cfg, a.workers, a.lose_rank, a.lose_after, d, **kw)
        events = [ev]
    else:
        hist, events = train_elastic(cfg, a.workers, d, **kw)
    for e in events:
        print(f"rank {e['lost_rank']} lost ({e['cause']}); {e['workers_after']} ranks resumed "
              f"from the checkpoint of step {e['resumed_from_step']}")
    return hist
