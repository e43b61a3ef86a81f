"""``TrainConfig``: everything one data-parallel run needs, checked before any process starts."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from ..argspec import SEED, Arg, check_settings, setting, within
from ..comm import Network, NetworkSchedule

OPTIMIZERS = ("sgd", "adam")

_NAME = Arg(str, help="a registered name")
_KW = Arg(dict, help="keyword arguments of the named scheme")


@dataclass(frozen=True)
class TrainConfig:
    """Everything one data-parallel run needs: model, data, steps, optimizer, the schemes at
    each extension point (compressor, aggregator, schedule, averaging, sync mode, attack), the
    network and stragglers, each named by string. Checked when built, before any process
    starts; frozen, so a config can be reused and compared.

    Every field is declared with its :class:`~lab.argspec.Arg` (type, range or choices) in the
    line that defines it, and checked from there; each ``*_kw`` is checked against the named
    scheme's own declaration; ``RULES`` check what spans fields (a model that fits the
    data, a batch the data set holds, an attack's knowledge and its count...). A new field is
    one line: ``link: str = setting("model", Arg(str, choices=("model", "kernel")))``."""

    model: str = setting("mlp", _NAME)
    data: str = setting("digits", _NAME)
    steps: int = setting(100, Arg(int, ge=1, help="optimizer steps"))
    batch_size: int = setting(64, Arg(int, ge=1, help="global batch, split over the workers"))
    lr: float = setting(0.1, Arg(float, gt=0, help="learning rate"))
    optimizer: str = setting("sgd", Arg(str, choices=OPTIMIZERS, help="sgd (with optional "
                                                                      "momentum) or adam"))
    momentum: float = setting(0.0, Arg(float, ge=0, lt=1, help="SGD's momentum"))
    weight_decay: float = setting(0.0, Arg(float, ge=0, help="L2 penalty"))
    compressor: str = setting("none", _NAME)       # a name from lab.compress.names()
    compressor_kw: dict = setting({}, _KW)
    error_feedback: bool = setting(False, Arg(bool, help="wrap the compressor in ErrorFeedback"))
    aggregator: str = setting("auto", _NAME)       # "auto": dense allreduce without a codec,
    aggregator_kw: dict = setting({}, _KW)         # else "compressed"
    # tensor by tensor (True) or one flat vector (False); None: the aggregator's own default
    layerwise: bool | None = setting(None, Arg(bool, none=True))
    # None, a Network, a preset ("1gbps") or "100Mbps,2ms"
    network: Any = setting(None, Arg((str, Network), none=True, help="the emulated link"))
    # a network that changes: "25Gbps,1ms:50 1Gbps,32ms:50"
    network_schedule: Any = setting(None, Arg((str, list, tuple, NetworkSchedule), none=True))
    # "model": the network emulated by the alpha-beta model; "kernel": ranks in network
    # namespaces whose NICs the kernel shapes to the network's rate (lab.comm.kernel)
    link: str = setting("model", Arg(str, choices=("model", "kernel"), help="how the network is made"))
    schedule: str = setting("sync", _NAME)         # when gradients move: lab.schedule
    schedule_kw: dict = setting({}, _KW)
    averaging: str = setting("none", _NAME)        # after the optimizer step: lab.averaging
    averaging_kw: dict = setting({}, _KW)
    sync: str = setting("allreduce", _NAME)        # who talks to whom: lab.sync
    sync_kw: dict = setting({}, _KW)
    # {rank: compute slowdown factor >= 1}
    slow_ranks: dict = setting({}, Arg(dict, help="stragglers: rank -> slowdown factor"))
    # random extra delay per step and rank, uniform in [0, jitter] s
    jitter: float = setting(0.0, Arg(float, ge=0, le=3600, help="seconds"))
    # an emulated device: each rank's forward + backward lasts this many seconds (lab.run.straggler)
    device_s: float | None = setting(None, Arg(float, gt=0, le=60, none=True, help="seconds"))
    byzantine: int = setting(0, Arg(int, ge=0, help="how many ranks (the last) run attack"))
    attack: str = setting("none", _NAME)           # a name from lab.attack
    attack_kw: dict = setting({}, _KW)
    # evaluate on held-out data every n steps (0: only at the end)
    eval_every: int = setting(20, Arg(int, ge=0, help="steps between evaluations"))
    seed: int = setting(0, SEED)
    model_kw: dict = setting({}, _KW)
    data_kw: dict = setting({}, _KW)
    stop_on_divergence: bool = setting(True, Arg(bool, help="stop a run whose loss diverged"))
    label: str = setting("", Arg(str, help="a name for tables and plots"))

    def __post_init__(self):
        check_settings(self)  # every field on its own: type, range, choices
        for rule in RULES:    # what spans fields, or needs a registry
            rule(self)

    def aggregator_name(self) -> str:
        """The aggregator that runs: ``aggregator``, or for "auto" dense allreduce without a
        codec and "compressed" with one."""
        if self.aggregator != "auto":
            return self.aggregator
        return "allreduce" if self.compressor == "none" and not self.error_feedback \
            else "compressed"

    @property
    def net(self) -> Network | None:
        """``network`` parsed into a :class:`~lab.comm.Network` (``None``: no emulated link)."""
        return Network.parse(self.network)

    @property
    def net_schedule(self) -> NetworkSchedule | None:
        """``network_schedule`` parsed (``None``: no schedule, the link stays ``network``)."""
        return NetworkSchedule.parse(self.network_schedule)

    def network_at(self, step: int) -> Network | None:
        """The emulated link in force at ``step``."""
        sched = self.net_schedule
        return sched.at(step) if sched is not None else self.net

    @property
    def name(self) -> str:
        """A short name for tables and legends: ``label`` if set, else the first scheme that
        differs from the plain default (sync mode, schedule, averaging, aggregator), else the
        compressor with ``+ef`` and its arguments."""
        if self.label:
            return self.label
        for field_, default in (("sync", "allreduce"), ("schedule", "sync"),
                                ("averaging", "none")):
            if getattr(self, field_) != default:
                return getattr(self, field_)
        if self.aggregator not in ("auto", "compressed", "allreduce"):
            return self.aggregator
        kw = ",".join(f"{k}={v}" for k, v in self.compressor_kw.items())
        ef = "+ef" if self.error_feedback else ""
        return f"{self.compressor}{ef}" + (f"({kw})" if kw else "")

    def with_(self, **changes) -> "TrainConfig":
        """A copy with some fields changed (and checked again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """The config as plain JSON-ready values (links written as their labels), plus its
        ``name``: what a run's record stores."""
        d = dataclasses.asdict(self)
        net = self.net
        d["network"] = None if net is None else net.label
        sched = self.net_schedule
        d["network_schedule"] = None if sched is None else sched.label
        d["slow_ranks"] = {str(k): v for k, v in self.slow_ranks.items()}
        d["name"] = self.name
        return d

    def check_workers(self, workers: int) -> None:
        """Raise before launch if this config cannot run on ``workers`` ranks."""
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be a positive int, got {workers!r}")
        from .. import sync as sync_modes
        split = getattr(sync_modes.REGISTRY.get(self.sync), "batch_ranks", lambda w: w)(workers)
        if self.batch_size % split:  # the ranks that share the global batch (not a server)
            raise ValueError(f"batch_size ({self.batch_size}) must be divisible by workers "
                             f"({split})" + ("" if split == workers else
                                             f" that compute, of {workers} ranks"))
        for r in self.slow_ranks:
            if r >= workers:
                raise ValueError(f"slow_ranks names rank {r}, but there are only {workers} "
                                 f"workers (ranks 0..{workers - 1})")
        if self.byzantine >= workers:
            raise ValueError(f"byzantine={self.byzantine} must be < workers ({workers}): "
                             f"rank 0 stays honest")
        # every named scheme may refuse a world it cannot run on, before any process starts:
        # a factory with a ``check(cfg, workers)`` classmethod is asked
        from .. import aggregate, attack, averaging, schedule, sync
        for reg, name in ((sync.REGISTRY, self.sync), (schedule.REGISTRY, self.schedule),
                          (averaging.REGISTRY, self.averaging), (attack.REGISTRY, self.attack),
                          (aggregate.REGISTRY, None if self.aggregator == "auto" else self.aggregator)):
            check = getattr(reg.get(name), "check", None) if name is not None else None
            if check is not None:
                check(self, workers)


# -- the rules of a config: what spans fields or needs a registry (each raises, naming it) ----
def _registries() -> dict:
    from .. import aggregate, attack, averaging, compress, data, models, schedule, sync
    return {"model": models.REGISTRY, "data": data.REGISTRY, "compressor": compress.REGISTRY,
            "aggregator": aggregate.REGISTRY, "schedule": schedule.REGISTRY,
            "averaging": averaging.REGISTRY, "sync": sync.REGISTRY, "attack": attack.REGISTRY}


#: field naming a scheme -> (its keyword field, what lab passes it itself)
NAMED = {"model": ("model_kw", ("data",)), "data": ("data_kw", ("seed",)),
         "schedule": ("schedule_kw", ("engine",)), "averaging": ("averaging_kw", ("engine",)),
         "sync": ("sync_kw", ("workers",)), "attack": ("attack_kw", ("engine", "byzantine")),
         "compressor": ("compressor_kw", ()), "aggregator": ("aggregator_kw", ("comm", "compressor"))}


def _names(cfg: TrainConfig) -> None:
    """Every named scheme is registered (a did-you-mean otherwise)."""
    regs = _registries()
    for field_ in ("model", "schedule", "averaging", "sync", "attack", "data", "compressor",
                   "aggregator"):
        name = getattr(cfg, field_)
        if field_ == "aggregator" and name == "auto":
            continue
        regs[field_].check(name, field_)
    if cfg.aggregator != "auto" and not regs["aggregator"].get(cfg.aggregator).uses_compressor \
            and (cfg.compressor != "none" or cfg.error_feedback):
        raise ValueError(f"aggregator={cfg.aggregator!r} does its own compression; "
                         f"leave compressor='none' and error_feedback=False (got "
                         f"compressor={cfg.compressor!r})")


def _keywords(cfg: TrainConfig) -> None:
    """Every ``*_kw`` against its scheme's signature and declared arguments (the codec is
    built: cheap, and its own checks run)."""
    from .. import compress
    regs = _registries()
    for field_, (kw_field, injected) in NAMED.items():
        kw = getattr(cfg, kw_field)
        for k in kw:
            if not isinstance(k, str):
                raise TypeError(f"{kw_field}: keys must be argument names (str), got {k!r}")
        name = cfg.aggregator_name() if field_ == "aggregator" else getattr(cfg, field_)
        if field_ == "aggregator" and cfg.layerwise is not None:
            kw = {**kw, "layerwise": cfg.layerwise}  # what the run passes the aggregator
        try:  # a misspelt option or a bad value fails here, not in every rank after launch
            regs[field_].check_arguments(name, kw, injected)
            if field_ == "compressor":
                compress.make(name, **kw)
        except (TypeError, ValueError) as e:
            raise within(e, kw_field) from None


def _optimizer(cfg: TrainConfig) -> None:
    if cfg.optimizer == "adam" and cfg.momentum:
        raise ValueError(f"momentum={cfg.momentum} is SGD's; optimizer='adam' keeps its own "
                         f"moments: leave momentum=0")


def _network(cfg: TrainConfig) -> None:
    try:
        Network.parse(cfg.network)  # raises on a bad spec
    except ValueError as e:
        raise within(e, "network") from None
    NetworkSchedule.parse(cfg.network_schedule)
    if cfg.network is not None and cfg.network_schedule is not None:
        raise ValueError("give network or network_schedule, not both")
    if cfg.link == "kernel" and cfg.network is None and cfg.network_schedule is None:
        raise ValueError("link='kernel' needs a network (its NICs are shaped to its rate), "
                         "e.g. network='1Gbps,0.1ms'")


def _stragglers(cfg: TrainConfig) -> None:
    for r, f in cfg.slow_ranks.items():
        if isinstance(r, bool) or not isinstance(r, int) or r < 0:
            raise ValueError(f"slow_ranks keys must be rank numbers >= 0, got {r!r}")
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not 1 <= f < math.inf:
            raise ValueError(f"slow_ranks[{r}] must be a finite slowdown factor >= 1, got {f!r}")


def _attack(cfg: TrainConfig) -> None:
    if cfg.byzantine and cfg.attack == "none":
        raise ValueError(f"byzantine={cfg.byzantine} ranks need an attack (attack='none')")


def _workload(cfg: TrainConfig) -> None:
    """The model fits the data (task, images) and the global batch fits the training set."""
    from .. import data, models
    models.check_fits(cfg.model, cfg.data)
    size = data.train_size(cfg.data, **cfg.data_kw)
    if size is not None and cfg.batch_size > size:
        raise ValueError(f"batch_size ({cfg.batch_size}) exceeds the {size} training examples "
                         f"of data={cfg.data!r}" + (f" with data_kw={cfg.data_kw}"
                                                    if cfg.data_kw else ""))


def _schemes(cfg: TrainConfig) -> None:
    """Each named scheme's own config rules (a factory's ``check_config(cfg)``: a schedule's
    options, an attack's knowledge against the number of attackers...)."""
    regs = _registries()
    for field_ in ("sync", "schedule", "averaging", "attack", "aggregator"):
        check = getattr(regs[field_].get(cfg.aggregator_name() if field_ == "aggregator"
                                         else getattr(cfg, field_)), "check_config", None)
        if check is not None:
            check(cfg)


#: The rules :meth:`TrainConfig.__post_init__` runs after the fields' own checks, in order.
RULES = (_names, _optimizer, _keywords, _network, _stragglers, _attack, _workload, _schemes)
