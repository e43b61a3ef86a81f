"""``PipelineConfig``: one pipeline-parallel run, validated before any process starts."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .. import data as data_mod, models
from ..comm import Network
from .lr import LR_SCHEDULES
from .stages import units

SCHEDULES = ("gpipe", "1f1b", "async", "async-stash", "async-nesterov")
DP_MODES = ("none", "allreduce", "sparse-avg")
OPTIMIZERS = ("sgd", "adam", "adamw", "nadam", "nadamw")


@dataclass(frozen=True)
class PipelineConfig:
    """One pipeline-parallel run: model and data, ``stages`` x ``replicas`` ranks, the
    schedule (GPipe, 1F1B, asynchronous), micro-batches, steps and the network. Checked when
    built, before any process starts."""

    model: str = "gpt"
    data: str = "text"
    stages: int = 4
    replicas: int = 1
    schedule: str = "gpipe"
    microbatches: int = 4          # per step and replica
    steps: int = 20
    batch_size: int = 32           # global batch per step (all replicas together)
    lr: float = 1e-3
    optimizer: str = "adam"        # async-nesterov always uses its NAdam(W) look-ahead
    momentum: float = 0.0          # sgd only
    beta1: float | None = None     # Adam family's first moment (None: 0.9)
    weight_decay: float = 0.0      # decoupled for adamw, nadamw and async-nesterov
    clip: float | None = None      # max gradient norm per stage and update (authors: 10)
    lr_schedule: str = "constant"  # or "cosine" (to 0.1 lr at the last update)
    warmup: int = 0                # linear warm-up updates
    schedule_kw: dict = field(default_factory=dict)  # async-nesterov: momentum, lr_correction
    dp: str = "none"               # across replicas: none, allreduce (sync), sparse-avg
    dp_kw: dict = field(default_factory=dict)        # sparse-avg: fraction, delay, ema, overlap
    network: str | None = None     # both axes, unless dp_network is given
    dp_network: str | None = None  # the replica-axis link (None: network)
    slow_ranks: dict = field(default_factory=dict)   # global rank -> compute slowdown
    jitter: float = 0.0
    model_kw: dict = field(default_factory=dict)
    data_kw: dict = field(default_factory=dict)
    seed: int = 0
    label: str = ""

    def __post_init__(self):
        def need(ok, msg):
            if not ok:
                raise ValueError(msg)
        for name in ("stages", "replicas", "microbatches", "steps", "batch_size"):
            v = getattr(self, name)
            need(isinstance(v, int) and not isinstance(v, bool) and v >= 1,
                 f"{name} must be a positive int, got {v!r}")
        need(self.schedule in SCHEDULES, f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        need(self.dp in DP_MODES, f"dp must be one of {DP_MODES}, got {self.dp!r}")
        need(self.optimizer in OPTIMIZERS, f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        need(self.lr > 0, f"lr must be > 0, got {self.lr!r}")
        need(self.beta1 is None or 0.0 <= self.beta1 < 1.0, f"beta1 must be in [0, 1), got {self.beta1!r}")
        need(self.weight_decay >= 0, f"weight_decay must be >= 0, got {self.weight_decay!r}")
        need(self.clip is None or self.clip > 0, f"clip must be > 0 or None, got {self.clip!r}")
        need(self.lr_schedule in LR_SCHEDULES, f"lr_schedule must be one of {LR_SCHEDULES}, got {self.lr_schedule!r}")
        need(isinstance(self.warmup, int) and self.warmup >= 0, f"warmup must be an int >= 0 (updates), got {self.warmup!r}")
        need(self.jitter >= 0, f"jitter must be >= 0 seconds, got {self.jitter!r}")
        need(self.model in models.names(), f"model must be one of {models.names()}, got {self.model!r}")
        need(self.data in data_mod.names(), f"data must be one of {data_mod.names()}, got {self.data!r}")
        need(self.batch_size % (self.replicas * self.microbatches) == 0,
             f"batch_size ({self.batch_size}) must be divisible by replicas x microbatches "
             f"({self.replicas} x {self.microbatches})")
        need(self.dp == "none" or self.replicas > 1 or self.dp_kw == {},
             "dp_kw given but there is only one replica")
        if self.dp == "sparse-avg":
            from .sparse_avg import SparseAverager
            SparseAverager.check_kw(**self.dp_kw)
        elif self.dp_kw:
            raise ValueError(f"dp_kw is only for dp='sparse-avg', got dp={self.dp!r}")
        if self.schedule == "async-nesterov":
            from .nesterov import check_kw
            check_kw(**self.schedule_kw)
        elif self.schedule_kw:
            raise ValueError(f"schedule_kw is only for schedule='async-nesterov', got {self.schedule!r}")
        Network.parse(self.network)
        Network.parse(self.dp_network)
        for r, f in self.slow_ranks.items():
            need(isinstance(r, int) and 0 <= r < self.world_size,
                 f"slow_ranks: rank {r!r} is not in [0, {self.world_size})")
            need(f >= 1.0, f"slow_ranks: factor for rank {r} must be >= 1, got {f!r}")
        n = self.n_units()
        need(self.stages <= n, f"stages ({self.stages}) must be <= the {n} layers (units) of "
             f"model {self.model!r} with model_kw={self.model_kw}")

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
