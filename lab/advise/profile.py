"""What one step of a method costs on this machine, measured once and priced anywhere.

A short real run (``world`` ranks, no emulated link) records, per step, the forward+backward
time, the codec time, and the ledger's traffic by collective (``{op: [calls, bytes]}``, from
``lab.train.loop.traffic``). The alpha-beta time of each op is linear in its calls and its
bytes (:mod:`lab.comm.cost`), so that record prices the step's communication exactly on any
link. A profile is taken at the world size it will be priced at: compute per rank shrinks with
the per-rank batch, an allgather's decoding grows with the ranks, and on a CPU the ranks share
its cores, as the measured runs the advisor is checked against do.
The traffic is what the ledger books per step. A synchronous schedule books each step's calls
in that step, so the second half of the run gives it after any warm-up; an overlapping one
(``fifo``, ``p3``: a thread sends while the next step computes) books an exchange when its call
returns, up to a step late (its first step books nothing, a later one two exchanges), so a window
that starts mid-run holds one exchange more or fewer than its steps (P3's profile had 1.125
calls a step: fp32's bytes times 9/8). The whole run starts with nothing in flight and ends with
every exchange done, so its ledger books exactly one exchange a step (Part 7's ledger check):
an overlapping schedule's traffic is the whole run's.
Profiles are cached per machine, model and method in ``~/.cache/lab/advise`` (override with
``$LAB_ADVISE_CACHE``), since ``lab advise`` is meant to answer in seconds; measuring them takes
about a minute the first time (``FIRST_RUN``), and ``progress=True`` says so on stderr.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .methods import Method


@dataclass(frozen=True)
class StepProfile:
    """Mean per-step costs of one method on one model, measured on ``world`` ranks."""

    method: str
    model: str
    world: int
    compute_s: float           # forward + backward (measured)
    codec_s: float             # compress + decompress (measured)
    traffic: dict              # op -> [calls, bytes] per step, rank 0's ledger
    params: int                # parameters of the model
    comm_s: float = 0.0        # in collectives on loopback, no emulated link (measured)
    server_s: float = 0.0      # a parameter server's own work (its updates); 0 for peers

    @property
    def bytes(self) -> float:
        """Bytes rank 0 hands to the network per step (a parameter server: through its link,
    pushes in and pulls out)."""
        return float(sum(b for _, b in self.traffic.values()))


def summarise(history, method: str, model: str, params: int) -> StepProfile:
    """A StepProfile from a run's History: means over the second half of its steps (after
    warm-ups such as DGC's, and over whole periods of local SGD when steps are a multiple of
    twice the period); the traffic of an overlapping schedule (not ``sync``) over the whole run,
    whose ledger books each step's exchange exactly once (see the module doc). A parameter
    server's History (rank 0 serves) gives the workers' compute per gradient, the server's
    update time as ``server_s`` and, as ``comm_s``, the rest of its step on loopback
    (receiving, replying and waiting for the workers)."""
    n = history.steps
    if n < 2:
        raise ValueError(f"history must have at least 2 steps to profile, got {n}")
    tail = slice(n // 2, n)
    booked = tail if history.config.get("schedule", "sync") == "sync" else slice(0, n)
    steps = history.series.get("traffic", [])[booked]
    if not steps:
        raise ValueError("history has no 'traffic' series: it was not recorded by lab.train")
    traffic: dict = {}
    for per_op in steps:
        for op, (calls, nbytes) in per_op.items():
            acc = traffic.setdefault(op, [0.0, 0.0])
            acc[0] += calls / len(steps)
            acc[1] += nbytes / len(steps)
    comm = float(np.mean(history.comm_s[tail]))
    per_grad = history.series.get("worker_compute_s")
    if per_grad:   # a parameter server: compute is the workers', one gradient each
        return StepProfile(method, model, history.world_size,
                           float(np.mean(per_grad[len(per_grad) // 2:])), 0.0, traffic, params,
                           comm, float(np.mean(history.compute_s[tail])))
    return StepProfile(method, model, history.world_size,
                       float(np.mean(history.compute_s[tail])), float(np.mean(history.codec_s[tail])),
                       traffic, params, comm)


def cache_dir() -> Path:
    return Path(os.environ.get("LAB_ADVISE_CACHE", Path.home() / ".cache" / "lab" / "advise"))


def write_cache(path: Path, data: dict) -> None:
    """Write ``data`` as JSON to ``path`` through a file of this process's own, then rename:
    two notebooks or tests that write the same cache at once each leave a whole file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)


def _digest(cfg) -> str:
    """A short hash of a TrainConfig: a cached profile is reused only for the same training
    (whether it would stop on divergence does not change what it computes)."""
    d = {k: v for k, v in cfg.to_dict().items() if k != "stop_on_divergence"}
    text = json.dumps(d, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _machine() -> str:
    """This machine in a cache file's name: its host name and CPU count."""
    return f"{platform.node()}-{os.cpu_count()}cpu"


def _key(model: str, world: int) -> Path:
    # v2: with loopback comm_s; v3: an overlapping schedule's traffic over the whole run
    return cache_dir() / f"{_machine()}-{model}-w{world}-v3.json"


#: What the first run of ``python -m lab advise --params 25e6 --compute-ms 120 --workers 16``
#: took on a busy 2-core machine: 57 s (45 s profiling the 14 methods on 16 ranks, 8 s timing
#: the codecs); said up front when profiles are to be measured.
FIRST_RUN = "the first run of every method at 16 ranks takes about a minute on 2 cores"


def say(text: str) -> None:
    """One line of progress on stderr (stdout keeps the answer, a table or JSON)."""
    print(f"lab advise: {text}", file=sys.stderr, flush=True)


def measure(methods: list[Method], model: str = "mlp", world: int = 2, steps: int = 16,
            base=None, use_cache: bool = True, progress: bool = False) -> dict[str, StepProfile]:
    """Profiles of ``methods`` on ``model``: cached ones are read, the rest measured in one
    launch of ``world`` ranks for ``steps`` steps each. ``progress``: say on stderr, before,
    what is measured, how long a first run takes and where it is cached, then one line per
    method as it is done."""
    from ..train import train_many
    from .methods import base_config
    if world < 1 or steps < 2:
        raise ValueError(f"world must be >= 1 and steps >= 2, got world={world}, steps={steps}")
    base = (base or base_config(model)).with_(steps=steps, eval_every=0)
    path = _key(model, world)
    cached = json.loads(path.read_text()) if use_cache and path.exists() else {}
    digest = {m.name: _digest(m.config(base)) for m in methods}
    out = {m.name: StepProfile(**cached[m.name]["profile"]) for m in methods
           if cached.get(m.name, {}).get("config") == digest[m.name]}
    todo = [m for m in methods if m.name not in out]
    if todo:
        if progress:
            where = f"cached in {path}" if use_cache else "not cached (--no-cache)"
            say(f"profiling {len(todo)} of {len(methods)} methods on {world} local ranks of "
                f"this machine, {steps} steps each ({model}): once per machine, model and "
                f"world size ({FIRST_RUN}); {where}, so later runs answer in seconds")
        t0 = time.perf_counter()
        hists = train_many([m.config(base) for m in todo], world, progress=False,
                           announce="lab advise:   profiled" if progress else None)
        if progress:
            say(f"profiled {len(todo)} methods in {time.perf_counter() - t0:.0f} s")
        for m, h in zip(todo, hists):
            out[m.name] = summarise(h, m.name, model, _params(base))
        if use_cache:
            cached.update({m.name: {"config": digest[m.name], "profile": asdict(out[m.name])}
                           for m in todo})
            write_cache(path, cached)
    return {m.name: out[m.name] for m in methods}


def _params(cfg) -> int:
    from ..data import load
    from ..models import make
    data = load(cfg.data, seed=cfg.seed, **cfg.data_kw)
    model = make(cfg.model, data, seed=cfg.seed, **cfg.model_kw)
    return sum(p.numel() for p in model.parameters())
