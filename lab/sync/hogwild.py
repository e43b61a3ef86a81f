"""Hogwild!: lock-free SGD by several processes on one model in shared memory (Niu, Recht, Re
and Wright, NeurIPS 2011, Algorithm 1).

Every process loops: pick an example ``e``, read the coordinates ``x_e`` it touches, compute
the gradient there, and write ``x_v <- x_v - lr * g_v`` for ``v`` in ``e``, with no lock. The
model is a float32 file in shared memory (``torch.from_file(..., shared=True)``: the same pages
that ``share_memory_()`` gives) mapped by every rank of ``lab.launch``; nothing crosses the
network. The paper assumes each component-wise add is atomic; ours (numpy on plain memory) is a
read-modify-write, so two processes writing one coordinate at once can lose an update. With
sparse examples that is rare, which is the paper's point (sec. 4: the collision rate is governed
by how many examples share a coordinate).

Problems: ``sparse`` (least squares, each example touching ``k`` of ``d`` coordinates, the
regime of the paper's analysis), ``counts`` (each step adds 1 to a coordinate: updates commute,
so the final counts show every lost update; ``overlap=False`` gives each process its own
coordinates, ``True`` makes them all hit the same few), and ``mlp`` (any ``TrainConfig`` model,
its parameters rebound to views of the shared vector, dense updates).
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from ..runtime import launch

PROBLEMS = ("sparse", "counts", "mlp")


@dataclass
class SparseLeastSquares:
    """``f(x) = 1/(2m) sum_e (a_e . x - b_e)^2`` with ``k`` nonzeros per row ``a_e``."""
    m: int = 2000
    d: int = 1000
    k: int = 8
    seed: int = 0

    def __post_init__(self):
        for arg in ("m", "d", "k"):
            if not isinstance(getattr(self, arg), int) or getattr(self, arg) < 1:
                raise ValueError(f"{arg} must be a positive int, got {getattr(self, arg)!r}")
        if self.k > self.d:
            raise ValueError(f"k ({self.k}) must be <= d ({self.d})")
        rng = np.random.default_rng(self.seed)
        self.cols = np.stack([rng.choice(self.d, self.k, replace=False) for _ in range(self.m)])
        self.vals = rng.standard_normal((self.m, self.k)).astype(np.float32)
        self.x_star = rng.standard_normal(self.d).astype(np.float32)
        self.b = (self.vals * self.x_star[self.cols]).sum(1)

    def objective(self, x: np.ndarray) -> float:
        r = (self.vals * x[self.cols]).sum(1) - self.b
        return float(0.5 * np.mean(r * r))

    def sgd_step(self, x: np.ndarray, e: int, lr: float) -> None:
        """Algorithm 1's inner step on example ``e``: read, then write, coordinates of ``e``."""
        c, a = self.cols[e], self.vals[e]
        r = float(a @ x[c]) - self.b[e]
        if not np.isfinite(r):
            raise FloatingPointError(f"residual of example {e} is {r} (lr={lr} too large?)")
        x[c] -= lr * r * a   # unlocked read-modify-write of k coordinates


@dataclass
class HogwildResult:
    problem: str
    processes: int
    steps: int                  # per process
    x: np.ndarray               # the shared model at the end
    seconds: list[float]        # wall time of each process's loop
    trace: list[tuple] = field(default_factory=list)  # rank 0: (seconds, objective or loss)
    final: float = float("nan")  # objective (sparse), lost updates (counts), test acc (mlp)

    @property
    def wall_s(self) -> float:
        return max(self.seconds)


def _rank(ctx, problem, path, numel, steps, lr, seed, kw):
    x_t = torch.from_file(path, shared=True, size=numel, dtype=torch.float32)
    x = x_t.numpy()  # same memory
    rng = np.random.default_rng(seed * 1_000_003 + ctx.rank)
    trace, every = [], max(1, steps // 20)
    t0 = time.perf_counter()
    if problem == "sparse":
        prob = SparseLeastSquares(seed=seed, **kw)
        for i, e in enumerate(rng.integers(0, prob.m, steps)):
            prob.sgd_step(x, int(e), lr)
            if ctx.rank == 0 and i % every == 0:
                trace.append((time.perf_counter() - t0, prob.objective(x)))
    elif problem == "counts":
        n = numel // ctx.world_size
        own = np.arange(ctx.rank * n, (ctx.rank + 1) * n) if not kw.get("overlap") \
            else np.arange(n)
        for v in rng.choice(own, steps):
            x[v] += 1.0      # unlocked read-modify-write
    else:
        trace = _train_mlp(ctx, x_t, steps, kw["cfg"])
    return time.perf_counter() - t0, trace


def _train_mlp(ctx, shared: torch.Tensor, steps: int, cfg):
    from .. import data as data_mod, models
    data = data_mod.load(cfg.data, seed=cfg.seed, **cfg.data_kw)
    model = models.make(cfg.model, data, seed=cfg.seed, **cfg.model_kw)
    loss_fn, i, trace = models.loss_fn(data.task), 0, []
    for p in model.parameters():  # the model *is* the shared vector
        p.data = shared[i:i + p.numel()].view_as(p)
        i += p.numel()
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    t0 = time.perf_counter()
    for step in range(steps):
        x, y = data.batch(step, cfg.batch_size, ctx.rank, ctx.world_size, cfg.seed)
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"step {step}: loss is {loss.item()} on rank {ctx.rank}")
        loss.backward()
        opt.step()  # in place on the shared memory, no lock
        if ctx.rank == 0:
            trace.append((time.perf_counter() - t0, float(loss.detach())))
    return trace


def hogwild(problem: str = "sparse", processes: int = 4, steps: int = 20000, lr: float = 0.05,
            seed: int = 0, timeout: float = 120, **kw) -> HogwildResult:
    """Run Hogwild with ``processes`` real processes, ``steps`` SGD steps each. ``kw``: the
    problem's sizes (``m, d, k`` for sparse; ``d, overlap`` for counts; ``cfg``, a TrainConfig,
    for mlp, whose ``lr`` and ``batch_size``, split over the processes, are used)."""
    if problem not in PROBLEMS:
        raise ValueError(f"problem must be one of {PROBLEMS}, got {problem!r}")
    for arg, v in (("processes", processes), ("steps", steps)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{arg} must be a positive int, got {v!r}")
    if not (isinstance(lr, (int, float)) and np.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be a finite number > 0, got {lr!r}")
    init, final = _initial(problem, processes, seed, kw)
    folder = tempfile.mkdtemp(prefix="hogwild-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    path = os.path.join(folder, "model.f32")
    try:
        init.numpy().tofile(path)
        out = launch(_rank, processes, problem, path, init.numel(), steps, lr, seed, kw,
                     timeout=timeout, progress=False, device="cpu")
        x = np.fromfile(path, dtype=np.float32)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    res = HogwildResult(problem, processes, steps, x, [o[0] for o in out], out[0][1])
    res.final = final(x, steps)
    return res


def _initial(problem, processes, seed, kw):
    """The starting vector and how to score the end (objective, lost updates, accuracy)."""
    if problem == "sparse":
        prob = SparseLeastSquares(seed=seed, **kw)
        return torch.zeros(prob.d), lambda x, steps: prob.objective(x)
    if problem == "counts":
        d = kw.get("d", 64)
        if not isinstance(d, int) or d < processes:
            raise ValueError(f"d must be an int >= processes ({processes}), got {d!r}")
        size = (d // processes) * processes
        return torch.zeros(size), lambda x, steps: float(processes * steps - x.sum())
    cfg = kw.get("cfg")
    from ..run.config import TrainConfig
    if not isinstance(cfg, TrainConfig):
        raise ValueError("problem='mlp' needs cfg=TrainConfig(...)")
    if cfg.batch_size % processes:
        raise ValueError(f"cfg.batch_size ({cfg.batch_size}) must be divisible by processes "
                         f"({processes})")
    from .. import data as data_mod, models
    data = data_mod.load(cfg.data, seed=cfg.seed, **cfg.data_kw)
    model = models.make(cfg.model, data, seed=cfg.seed, **cfg.model_kw)
    init = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).float()

    def accuracy(x, steps):
        from ..run.build import evaluate
        torch.nn.utils.vector_to_parameters(torch.from_numpy(x.copy()), model.parameters())
        return evaluate(model, data, torch.device("cpu"))[1]
    return init, accuracy
