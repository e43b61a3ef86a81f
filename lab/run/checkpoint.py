"""Checkpoints of a run, written atomically, and resuming from the newest one.

A checkpoint is a folder ``DIR/step-000010/`` holding ``meta.json`` (the step, the world size,
the config) and one ``rank{r}.pt`` per rank: every rank keeps state of its own (error-feedback
residuals, a codec's random generator, its straggler's delays, its share of the history). Each
rank writes its file into ``DIR/.tmp-step-000010/`` (file written under a temporary name, then
``os.replace``d), all ranks meet at a barrier, and rank 0 writes ``meta.json`` and renames the
folder: a checkpoint folder is complete or absent, whenever the run is killed. The newest two
checkpoints are kept; the last step is always checkpointed (the trained model is kept). Nothing here runs when ``checkpoint_every == 0``.
"""
from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

_STEP = re.compile(r"^step-(\d+)$")
#: How many checkpoints a run keeps (the newest).
KEEP = 2


def check_args(checkpoint_every, checkpoint_dir, resume) -> None:
    """Bad checkpoint arguments raise a ValueError naming them, before any process starts."""
    if isinstance(checkpoint_every, bool) or not isinstance(checkpoint_every, int) \
            or checkpoint_every < 0:
        raise ValueError(f"checkpoint_every must be an int >= 0 (steps; 0: no checkpoints), "
                         f"got {checkpoint_every!r}")
    if checkpoint_every and checkpoint_dir is None:
        raise ValueError(f"checkpoint_every={checkpoint_every} needs checkpoint_dir (the folder "
                         f"the checkpoints go to)")
    if resume is not None and latest(resume) is None:
        raise ValueError(f"resume={str(resume)!r}: no complete checkpoint (step-N folder with "
                         f"meta.json) in it")


def plan(checkpoint_every: int, checkpoint_dir, resume, config: dict, world_size: int,
         kind: str) -> dict | None:
    """What each rank of a ``train`` call is told about checkpoints: ``{"every", "dir",
    "resume"}`` (``resume``: the newest checkpoint folder, checked against ``config`` and
    ``world_size``), or None when the run neither checkpoints nor resumes."""
    check_args(checkpoint_every, checkpoint_dir, resume)
    if not checkpoint_every and resume is None:
        return None
    out = {"every": checkpoint_every, "dir": checkpoint_dir, "resume": None}
    if resume is not None:
        path = latest(resume)
        check_resume(read_meta(path), config, world_size, kind)
        out["resume"] = str(path)
    return out


def latest(directory):
    """The newest complete checkpoint folder in ``directory``, a ``pathlib.Path`` (None if there
    is none)."""
    d = Path(directory)
    if not d.is_dir():
        return None
    found = [(int(m.group(1)), p) for p in d.iterdir()
             if (m := _STEP.match(p.name)) and (p / "meta.json").is_file()]
    return max(found)[1] if found else None


def read_meta(path) -> dict:
    """The ``meta.json`` of checkpoint directory ``path``: kind of run, step, world size, config."""
    with open(Path(path) / "meta.json") as f:
        return json.load(f)


#: fields that govern how a run is run, not what it computes: a resume may change them, and a
#: checkpoint written before one existed resumes with its default
RUN_CONTROL = {"stop_on_divergence": True, "link": "model", "label": ""}


def check_resume(meta: dict, config: dict, world_size: int, kind: str) -> None:
    """The checkpoint must be of the same kind of run, config and world size (fields in
    :data:`RUN_CONTROL` aside)."""
    if meta["kind"] != kind:
        raise ValueError(f"resume: the checkpoint is of a {meta['kind']!r} run, not {kind!r}")
    saved = meta["config"]
    config = json.loads(json.dumps(config, default=str))  # as it was stored
    diff = sorted(k for k in set(saved) | set(config)
                  if k not in RUN_CONTROL and saved.get(k) != config.get(k))
    if diff:
        raise ValueError("resume: the config differs from the checkpointed run's in "
                         + ", ".join(f"{k} (checkpoint {saved.get(k)!r}, given {config.get(k)!r})"
                                     for k in diff))
    if meta["world_size"] != world_size:
        raise ValueError(f"resume: the checkpoint has {meta['world_size']} ranks, this run "
                         f"{world_size} (workers)")


def rng_state() -> dict:
    """The process-wide random generators (torch, numpy, python)."""
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
            "python": random.getstate()}


def set_rng_state(s: dict) -> None:
    """Restore the generators saved by :func:`rng_state`."""
    torch.set_rng_state(s["torch"])
    np.random.set_state(s["numpy"])
    random.setstate(s["python"])


class Checkpointer:
    """One rank's side: :meth:`due` after each step, :meth:`write` when it is."""

    def __init__(self, every: int, directory, rank: int, world_size: int, config: dict,
                 kind: str, collective: bool = True):
        # collective=False: rank 0 alone writes (a parameter server, whose workers hold no
        # state and are busy in a receive, so a barrier would never be met)
        self.every, self.dir, self.collective = every, Path(directory), collective
        self.rank, self.world_size, self.config, self.kind = rank, world_size, config, kind

    def due(self, done: int, total: int) -> bool:
        """Every ``every`` steps, and after the last (the trained model is kept too)."""
        return done % self.every == 0 or done == total

    def write(self, done: int, state: dict) -> None:
        """All ranks call this after step ``done``; it returns when the checkpoint is complete."""
        name = f"step-{done:08d}"
        tmp = self.dir / f".tmp-{name}"
        tmp.mkdir(parents=True, exist_ok=True)
        part = tmp / f"rank{self.rank}.pt.part"
        torch.save(state, part)
        os.replace(part, tmp / f"rank{self.rank}.pt")
        if self.collective and dist.is_initialized():
            dist.barrier()  # every rank's file is in
        if self.rank == 0:
            meta = {"kind": self.kind, "step": done, "world_size": self.world_size,
                    "config": self.config}
            with open(tmp / "meta.json.part", "w") as f:
                json.dump(meta, f, indent=1, default=str)
            os.replace(tmp / "meta.json.part", tmp / "meta.json")
            final = self.dir / name
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
            old = sorted((int(m.group(1)), p) for p in self.dir.iterdir()
                         if (m := _STEP.match(p.name)) and int(m.group(1)) < done)
            for _, p in old[:-(KEEP - 1) or None]:  # the newest KEEP are kept
                shutil.rmtree(p, ignore_errors=True)
        if self.collective and dist.is_initialized():
            dist.barrier()  # nobody runs ahead into the next checkpoint's folder


def load(path, rank: int) -> dict:
    """Rank ``rank``'s state from checkpoint folder ``path``."""
    return torch.load(Path(path) / f"rank{rank}.pt", weights_only=False)
