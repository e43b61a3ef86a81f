"""``TrainConfig``: everything one data-parallel run needs, checked before any process starts."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ..comm import Network, NetworkSchedule

OPTIMIZERS = ("sgd", "adam")


@dataclass(frozen=True)
class TrainConfig:
    """Everything one data-parallel run needs: model, data, steps, optimizer, the schemes at
    each extension point (compressor, aggregator, schedule, averaging, sync mode, attack), the
    network and stragglers, each named by string. Checked when built, before any process
    starts; frozen, so a config can be reused and compared."""

    model: str = "mlp"
    data: str = "digits"
    steps: int = 100
    batch_size: int = 64          # global batch, split evenly over the workers
    lr: float = 0.1
    optimizer: str = "sgd"        # "sgd" (with optional momentum) or "adam"
    momentum: float = 0.0
    weight_decay: float = 0.0
    compressor: str = "none"      # a name from lab.compress.names()
    compressor_kw: dict = field(default_factory=dict)
    error_feedback: bool = False  # wrap the compressor in ErrorFeedback
    aggregator: str = "auto"      # "auto": dense allreduce without a codec, else "compressed"
    aggregator_kw: dict = field(default_factory=dict)
    layerwise: bool | None = None  # tensor by tensor (True) or one flat vector (False);
                                   # None: the aggregator's own default
    network: Any = None           # None, a Network, a preset ("1gbps") or "100Mbps,2ms"
    network_schedule: Any = None  # a network that changes: "25Gbps,1ms:50 1Gbps,32ms:50"
    schedule: str = "sync"        # when gradients move: a name from lab.schedule
    schedule_kw: dict = field(default_factory=dict)
    averaging: str = "none"       # after the optimizer step: a name from lab.averaging
    averaging_kw: dict = field(default_factory=dict)
    sync: str = "allreduce"       # who talks to whom: a name from lab.sync
    sync_kw: dict = field(default_factory=dict)
    slow_ranks: dict = field(default_factory=dict)  # {rank: compute slowdown factor >= 1}
    jitter: float = 0.0           # random extra delay per step and rank, uniform in [0, jitter] s
    byzantine: int = 0            # how many ranks (the last ones) run ``attack``
    attack: str = "none"          # a name from lab.attack
    attack_kw: dict = field(default_factory=dict)
    eval_every: int = 20          # evaluate on held-out data every n steps (0: only at the end)
    seed: int = 0
    model_kw: dict = field(default_factory=dict)
    data_kw: dict = field(default_factory=dict)
    label: str = ""               # a name for tables and plots

    def __post_init__(self):
        from .. import aggregate, attack, averaging, compress, data, models, schedule, sync
        models.REGISTRY.check(self.model, "model")
        schedule.REGISTRY.check(self.schedule, "schedule")
        averaging.REGISTRY.check(self.averaging, "averaging")
        sync.REGISTRY.check(self.sync, "sync")
        attack.REGISTRY.check(self.attack, "attack")
        data.REGISTRY.check(self.data, "data")
        compress.REGISTRY.check(self.compressor, "compressor")
        if self.aggregator != "auto":
            aggregate.REGISTRY.check(self.aggregator, "aggregator")
            takes = aggregate.REGISTRY.get(self.aggregator).uses_compressor
            if not takes and (self.compressor != "none" or self.error_feedback):
                raise ValueError(f"aggregator={self.aggregator!r} does its own compression; "
                                 f"leave compressor='none' and error_feedback=False (got "
                                 f"compressor={self.compressor!r})")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        for name in ("steps", "batch_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        if not isinstance(self.eval_every, int) or self.eval_every < 0:
            raise ValueError(f"eval_every must be an int >= 0, got {self.eval_every!r}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr!r}")
        if not 0 <= self.momentum < 1:
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum!r}")
        for name in ("compressor_kw", "aggregator_kw", "model_kw", "data_kw", "schedule_kw",
                     "averaging_kw", "sync_kw", "attack_kw", "slow_ranks"):
            if not isinstance(getattr(self, name), dict):
                raise TypeError(f"{name} must be a dict, got {type(getattr(self, name)).__name__}")
        for reg, name, kw, injected in ((compress.REGISTRY, self.compressor, "compressor_kw", ()),
                                        (averaging.REGISTRY, self.averaging, "averaging_kw", ("engine",)),
                                        (attack.REGISTRY, self.attack, "attack_kw", ("engine", "byzantine"))):
            try:  # a misspelt option fails here, not in every rank after launch
                reg.check_arguments(name, getattr(self, kw), injected)
            except TypeError as e:
                raise ValueError(f"{kw}: {e}") from None
        try:  # a bad value (sketchml col_ratio=0) fails here too, naming the argument
            compress.make(self.compressor, **self.compressor_kw)
        except (TypeError, ValueError) as e:
            raise ValueError(f"compressor_kw: {e}") from None
        Network.parse(self.network)  # raises on a bad spec
        NetworkSchedule.parse(self.network_schedule)
        if self.network is not None and self.network_schedule is not None:
            raise ValueError("give network or network_schedule, not both")
        for r, f in self.slow_ranks.items():
            if isinstance(r, bool) or not isinstance(r, int) or r < 0:
                raise ValueError(f"slow_ranks keys must be rank numbers >= 0, got {r!r}")
            if isinstance(f, bool) or not isinstance(f, (int, float)) or not f >= 1:
                raise ValueError(f"slow_ranks[{r}] must be a slowdown factor >= 1, got {f!r}")
        if isinstance(self.jitter, bool) or not isinstance(self.jitter, (int, float)) \
                or not self.jitter >= 0:
            raise ValueError(f"jitter must be a number of seconds >= 0, got {self.jitter!r}")
        if isinstance(self.byzantine, bool) or not isinstance(self.byzantine, int) \
                or self.byzantine < 0:
            raise ValueError(f"byzantine must be an int >= 0, got {self.byzantine!r}")
        if self.byzantine and self.attack == "none":
            raise ValueError(f"byzantine={self.byzantine} ranks need an attack (attack='none')")

    @property
    def net(self) -> Network | None:
        return Network.parse(self.network)

    @property
    def net_schedule(self) -> NetworkSchedule | None:
        return NetworkSchedule.parse(self.network_schedule)

    def network_at(self, step: int) -> Network | None:
        """The emulated link in force at ``step``."""
        sched = self.net_schedule
        return sched.at(step) if sched is not None else self.net

    @property
    def name(self) -> str:
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
