"""``PipelineConfig``: one pipeline-parallel run, validated before any process starts."""
from __future__ import annotations

import difflib
from dataclasses import asdict, dataclass

from .. import data as data_mod, models
from ..argspec import SEED, Arg, check_settings, setting, within
from ..comm import Network
from .lr import LR_SCHEDULES
from .nesterov import MU_SCHEDULES
from .stages import units

SCHEDULES = ("gpipe", "1f1b", "async", "async-stash", "async-nesterov")
LINKS = ("model", "kernel")
DP_MODES = ("none", "allreduce", "sparse-avg")
OPTIMIZERS = ("sgd", "adam", "adamw", "nadam", "nadamw")

_NET = Arg((str, Network), none=True, help="an emulated link: a preset or '1Gbps,1ms'")
_KW = Arg(dict, help="keyword arguments")
#: what ``dp_kw`` (dp='sparse-avg') and ``schedule_kw`` (schedule='async-nesterov') take: their
#: declarations, checked here by name and value before ``SparseAverager.check_kw`` and
#: ``nesterov.check_kw`` (which use the same defaults) run
DP_KW = {"fraction": Arg(float, gt=0, le=1, help="fraction of the parameters averaged a step"),
         "delay": Arg(int, ge=0, help="steps an average may arrive late"),
         "ema": Arg(float, ge=0, lt=1, none=True, help="correction's moving average (None: off)"),
         "overlap": Arg(bool, help="non-blocking averaging"),
         "correction": Arg(str, choices=("ema", "progress", "none"),
                           help="the late average's merge: EMA drift, exact progress, overwrite")}
SCHEDULE_KW = {"momentum": Arg(float, ge=0, lt=1, help="the look-ahead's momentum (NAdam beta1)"),
               "lr_correction": Arg(int, ge=0, help="PipeMare warm-up updates (0: off)")}


@dataclass(frozen=True)
class PipelineConfig:
    """One pipeline-parallel run: model and data, ``stages`` x ``replicas`` ranks, the
    schedule (GPipe, 1F1B, asynchronous), micro-batches, steps and the network. Checked when
    built, before any process starts: every field from its declaration (the line that defines
    it), then ``RULES`` across fields."""

    model: str = setting("gpt", Arg(str, choices=models.names))
    data: str = setting("text", Arg(str, choices=data_mod.names))
    stages: int = setting(4, Arg(int, ge=1, le=256, help="ranks per replica"))
    replicas: int = setting(1, Arg(int, ge=1, le=256, help="copies of the pipeline"))
    schedule: str = setting("gpipe", Arg(str, choices=SCHEDULES))
    microbatches: int = setting(4, Arg(int, ge=1, help="per step and replica"))
    steps: int = setting(20, Arg(int, ge=1, help="optimizer steps"))
    batch_size: int = setting(32, Arg(int, ge=1, help="global batch per step (all replicas)"))
    lr: float = setting(1e-3, Arg(float, gt=0, help="learning rate"))
    # async-nesterov always uses its NAdam(W) look-ahead
    optimizer: str = setting("adam", Arg(str, choices=OPTIMIZERS))
    momentum: float = setting(0.0, Arg(float, ge=0, lt=1, help="sgd's momentum"))
    # Adam family's first moment (None: 0.9)
    beta1: float | None = setting(None, Arg(float, ge=0, lt=1, none=True))
    # every NAdam's mu_t: torch's (the authors') warm-up beta1 (1 - 0.5 * 0.96^(0.004 t)), or
    # "constant": beta1 from the first update; "compressed": torch's with psi = 0.004 x 50,000 / U,
    # the authors' 50,000 updates squeezed into the run's U (lab.pipeline.nesterov)
    mu_schedule: str = setting("warmup", Arg(str, choices=MU_SCHEDULES))
    # decoupled for adamw, nadamw and async-nesterov
    weight_decay: float = setting(0.0, Arg(float, ge=0))
    # max gradient norm per stage and update (authors: 10)
    clip: float | None = setting(None, Arg(float, gt=0, none=True))
    # or "cosine" (to 0.1 lr at the last update)
    lr_schedule: str = setting("constant", Arg(str, choices=LR_SCHEDULES))
    warmup: int = setting(0, Arg(int, ge=0, help="linear warm-up updates"))
    schedule_kw: dict = setting({}, _KW)        # async-nesterov: momentum, lr_correction
    # async-stash: keep only a micro-batch's input and run its forward again, at the stashed
    # weights, in the backward pass (the authors' --recompute): the same gradient, less memory
    recompute: bool = setting(False, Arg(bool, help="recompute the forward pass at the stash"))
    # across replicas: none, allreduce (sync), sparse-avg
    dp: str = setting("none", Arg(str, choices=DP_MODES))
    dp_kw: dict = setting({}, _KW)              # sparse-avg: fraction, delay, ema, overlap
    network: str | None = setting(None, _NET)   # both axes, unless dp_network is given
    dp_network: str | None = setting(None, _NET)  # the replica-axis link (None: network)
    # "model": the network emulated by the alpha-beta model; "kernel": every rank in a network
    # namespace whose NIC the kernel shapes to the network's rate (lab.comm.kernel)
    link: str = setting("model", Arg(str, choices=LINKS, help="how the network is made"))
    slow_ranks: dict = setting({}, Arg(dict, help="global rank -> compute slowdown"))
    # an emulated device: a forward pass of one micro-batch lasts at least this many seconds on
    # every stage (a backward pass twice that; slow_ranks multiply both), whatever the host's
    # load; None: the measured compute, stretched by slow_ranks
    forward_s: float | None = setting(None, Arg(float, gt=0, le=60, none=True, help="seconds"))
    jitter: float = setting(0.0, Arg(float, ge=0, le=3600, help="seconds"))
    model_kw: dict = setting({}, _KW)
    data_kw: dict = setting({}, _KW)
    # non-identical data: each replica draws from its own contiguous shard (lab.pipeline.shards)
    shards: bool = setting(False, Arg(bool, help="each replica on its own shard of the data"))
    seed: int = setting(0, SEED)
    label: str = setting("", Arg(str))

    def __post_init__(self):
        check_settings(self)
        for rule in RULES:
            rule(self)

    @property
    def world_size(self) -> int:
        return self.stages * self.replicas

    @property
    def name(self) -> str:
        return self.label or self.schedule

    def n_units(self) -> int:
        data = data_mod.load(self.data, seed=self.seed, **self.data_kw)
        return len(units(models.make(self.model, data, seed=self.seed, **self.model_kw)))

    def check(self, world_size: int) -> None:
        """Refuse a mesh that does not fill ``world_size`` processes."""
        if world_size != self.world_size:
            raise ValueError(f"stages x replicas ({self.stages} x {self.replicas} = "
                             f"{self.world_size}) must equal the world size ({world_size})")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["slow_ranks"] = {str(k): v for k, v in self.slow_ranks.items()}
        d["name"] = self.name
        return d


# -- the rules across fields (each raises, naming what is wrong) ---------------------------------
def _need(ok: bool, msg: str) -> None:
    if not ok:
        raise ValueError(msg)


def _batch(cfg: PipelineConfig) -> None:
    _need(cfg.batch_size % (cfg.replicas * cfg.microbatches) == 0,
          f"batch_size ({cfg.batch_size}) must be divisible by replicas x microbatches "
          f"({cfg.replicas} x {cfg.microbatches})")


def _optimizer(cfg: PipelineConfig) -> None:
    _need(not cfg.momentum or (cfg.optimizer == "sgd" and cfg.schedule != "async-nesterov"),
          f"momentum={cfg.momentum} is sgd's (optimizer={cfg.optimizer!r}, "
          f"schedule={cfg.schedule!r}): leave it 0, or use beta1 for the Adam family")
    _need(cfg.beta1 is None or cfg.optimizer != "sgd",
          f"beta1={cfg.beta1} is the Adam family's first moment; optimizer='sgd' takes momentum")


def _declared(where: str, kw: dict, args: dict) -> None:
    """``kw``'s names and values against ``args`` (name -> Arg)."""
    for k, v in kw.items():
        if k not in args:
            close = difflib.get_close_matches(str(k), args, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"{where}: unknown argument {k!r}{hint} (its arguments: "
                             f"{', '.join(args)})")
        args[k].check(v, k, where)


def _variants(cfg: PipelineConfig) -> None:
    nadam = cfg.schedule == "async-nesterov" or cfg.optimizer in ("nadam", "nadamw")
    _need(cfg.mu_schedule == "warmup" or nadam,
          f"mu_schedule={cfg.mu_schedule!r} is NAdam's (optimizer={cfg.optimizer!r}, "
          f"schedule={cfg.schedule!r}): use optimizer='nadam'/'nadamw' or "
          f"schedule='async-nesterov'")
    _need(not cfg.recompute or cfg.schedule == "async-stash",
          f"recompute=True re-runs the forward pass at the stashed weights: it needs "
          f"schedule='async-stash', got {cfg.schedule!r} ('async' always recomputes, at the "
          f"current weights)")


def _keywords(cfg: PipelineConfig) -> None:
    _need(cfg.dp == "none" or cfg.replicas > 1 or cfg.dp_kw == {},
          "dp_kw given but there is only one replica")
    if cfg.dp == "sparse-avg":
        _declared("dp_kw", cfg.dp_kw, DP_KW)
        from .sparse_avg import SparseAverager
        SparseAverager.check_kw(**cfg.dp_kw)
    elif cfg.dp_kw:
        raise ValueError(f"dp_kw is only for dp='sparse-avg', got dp={cfg.dp!r}")
    if cfg.schedule == "async-nesterov":
        _declared("schedule_kw", cfg.schedule_kw, SCHEDULE_KW)
        from .nesterov import check_kw
        check_kw(**cfg.schedule_kw)
    elif cfg.schedule_kw:
        raise ValueError(f"schedule_kw is only for schedule='async-nesterov', got "
                         f"{cfg.schedule!r}")
    for kw_field, reg, name, injected in (("model_kw", models.REGISTRY, cfg.model, ("data",)),
                                          ("data_kw", data_mod.REGISTRY, cfg.data, ("seed",))):
        try:
            reg.check_arguments(name, getattr(cfg, kw_field), injected)
        except (TypeError, ValueError) as e:
            raise within(e, kw_field) from None


def _links(cfg: PipelineConfig) -> None:
    for name in ("network", "dp_network"):
        try:
            Network.parse(getattr(cfg, name))
        except ValueError as e:
            raise within(e, name) from None
    if cfg.link != "kernel":
        return
    _need(cfg.network is not None, "link='kernel' needs a network (every NIC is shaped to its "
          "rate), e.g. network='1Gbps,0.5ms'")
    pp, dp = Network.parse(cfg.network), Network.parse(cfg.dp_network)
    # one NIC per rank, one rate: a replica axis at another rate would need per-destination
    # shaping (htb classes filtered on the peers' addresses), which lab.comm.kernel does not do
    _need(dp is None or cfg.replicas == 1 or dp.bandwidth == pp.bandwidth,
          f"link='kernel' shapes each rank's one NIC to one rate, but dp_network="
          f"{cfg.dp_network!r} and network={cfg.network!r} differ in bandwidth: give them the "
          f"same bandwidth (their latencies may differ: on a kernel link latency is the model's), "
          f"or use link='model'")


def _stragglers(cfg: PipelineConfig) -> None:
    for r, f in cfg.slow_ranks.items():
        _need(isinstance(r, int) and not isinstance(r, bool) and 0 <= r < cfg.world_size,
              f"slow_ranks: rank {r!r} is not in [0, {cfg.world_size})")
        _need(isinstance(f, (int, float)) and not isinstance(f, bool) and 1.0 <= f < float("inf"),
              f"slow_ranks: factor for rank {r} must be a finite number >= 1, got {f!r}")


def _workload(cfg: PipelineConfig) -> None:
    """The model fits the data, the batch the training set, the stages the model's layers."""
    models.check_fits(cfg.model, cfg.data)
    size = data_mod.train_size(cfg.data, **cfg.data_kw)
    _need(size is None or cfg.batch_size <= size,
          f"batch_size ({cfg.batch_size}) exceeds the {size} training examples of "
          f"data={cfg.data!r}")
    n = cfg.n_units()
    _need(cfg.stages <= n, f"stages ({cfg.stages}) must be <= the {n} layers (units) of "
          f"model {cfg.model!r} with model_kw={cfg.model_kw}")


#: The rules :meth:`PipelineConfig.__post_init__` runs after the fields' own checks, in order.
RULES = (_batch, _optimizer, _variants, _keywords, _links, _stragglers, _workload)
