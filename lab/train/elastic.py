"""A worker lost between outer steps: the run goes on with the survivors from the last checkpoint.

What torchft exists for, in its smallest restart-based form (the torchelastic way, not torchft's
in-place quorum): a data-parallel run checkpoints at every outer step (``checkpoint_every = H``);
when a rank dies, the launch fails (:class:`~lab.run.RunFailed`); the newest complete checkpoint
is re-formed for the surviving ranks (the lost rank's file dropped, the others renumbered, the
world size lowered) and the run resumes on them. After a DiLoCo outer step every rank holds the
same parameters and outer state, so nothing of the model is lost; the lost rank's inner steps
since that outer step are, and they are redone. No data is lost: a step's global batch is drawn
from (seed, step) and split over however many ranks there are (``lab.data.Dataset.batch``),
so the survivors take the lost rank's share. Deviation from torchft: the survivors restart from
the checkpoint rather than carrying on in place.
"""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import signal
import threading
import time
from pathlib import Path

from ..run.checkpoint import latest, load, read_meta
from ..run.failed import RunFailed
from .loop import train


def shrink(checkpoint, lost: int, out_dir) -> Path:
    """Copy checkpoint folder ``checkpoint`` into ``out_dir`` without rank ``lost``: the other
    ranks renumbered 0.. in order, ``meta.json``'s world size one lower. Returns the new folder."""
    src = Path(checkpoint)
    meta = read_meta(src)
    n = meta["world_size"]
    if not 0 <= lost < n:
        raise ValueError(f"lost must be a rank in [0, {n}), got {lost}")
    if n < 2:
        raise ValueError(f"lost: a {n}-rank run has no survivors to go on with")
    dst = Path(out_dir) / src.name
    dst.mkdir(parents=True, exist_ok=False)
    for new, old in enumerate(r for r in range(n) if r != lost):
        shutil.copyfile(src / f"rank{old}.pt", dst / f"rank{new}.pt")
    meta = {**meta, "world_size": n - 1}
    (dst / "meta.json").write_text(json.dumps(meta, indent=1, default=str))
    return dst


def _kill_when(directory: Path, after_step: int, rank: int, stop: threading.Event) -> None:
    # SIGKILL rank `rank`'s process once a checkpoint at or past `after_step` is complete
    while not stop.is_set():
        ck = latest(directory)
        if ck is not None and read_meta(ck)["step"] >= after_step:
            for p in mp.active_children():
                if p.name == f"lab-rank-{rank}" and p.pid:
                    os.kill(p.pid, signal.SIGKILL)
                    return
        time.sleep(0.002)


def _period(config) -> int:
    h_outer = (config.averaging_kw or {}).get("period")
    if not h_outer:
        raise ValueError("config: an averaging scheme with a period (diloco, streaming_diloco, "
                         "local) is needed, its outer step is where the run re-forms")
    return int(h_outer)


def train_elastic(config, workers: int, directory, min_workers: int = 2, _on_start=None, **kw):
    """Train ``config`` on ``workers`` ranks, checkpointing every outer step into
    ``directory``; whenever a rank other than 0 dies, go on with the survivors from the newest
    checkpoint, down to ``min_workers``. Returns ``(history, events)``: one History of all
    steps (its loss the mean over the ranks there were at each step) and one event a fault,
    ``{"lost_rank", "resumed_from_step", "workers_after", "cause"}``. A failure of rank 0 (it
    keeps the run's evaluation and history), of every rank at once, or one before the first
    checkpoint is raised as it came."""
    h_outer = _period(config)
    if not isinstance(min_workers, int) or not 1 <= min_workers <= workers:
        raise ValueError(f"min_workers must be an int in [1, {workers}], got {min_workers!r}")
    root, n, resume, events, losses = Path(directory), workers, None, [], []
    while True:
        if config.batch_size % n:
            raise ValueError(f"config.batch_size ({config.batch_size}) must divide over the "
                             f"{n} ranks left")
        here = root / f"{n}-ranks"
        if _on_start is not None:
            _on_start(here, n)
        try:
            h = train(config, n, resume=resume, checkpoint_every=h_outer, checkpoint_dir=here, **kw)
            break
        except RunFailed as err:
            last = latest(here)
            if err.rank in (None, 0) or last is None or n - 1 < min_workers:
                raise
            step = read_meta(last)["step"]
            # the loss before the fault is the mean over all the ranks there were then
            losses.append((step, n, [load(last, r)["history"].loss for r in range(n)]))
            resume = root / f"{n - 1}-ranks"   # the survivors resume from the folder
            shrink(last, err.rank, resume)
            events.append({"lost_rank": err.rank, "resumed_from_step": step,
                           "workers_after": n - 1, "cause": err.error["cause"]})
            n -= 1
    for step, ranks, before in reversed(losses):   # the earliest fault's ranks count first
        h.loss[:step] = [sum(x) / ranks for x in zip(*before)]
    return h, events


def train_losing_a_worker(config, workers: int, lose: int, after_step: int, directory, **kw):
    """Train ``config`` (a DiLoCo-style run) on ``workers`` ranks, checkpointing every outer
    step, kill rank ``lose`` once the checkpoint of step ``after_step`` (or a later one) exists,
    and go on with the ``workers - 1`` survivors from the newest checkpoint
    (:func:`train_elastic`). Returns ``(history, event)``: one History of all steps (its loss
    the mean over the ranks there were at each step) and ``event`` = ``{"lost_rank",
    "resumed_from_step", "workers_after", "cause"}``."""
    _period(config)
    if not 0 < lose < workers:
        raise ValueError(f"lose must be a rank in [1, {workers}) (rank 0 keeps the run's "
                         f"evaluation and history), got {lose}")
    if config.batch_size % (workers - 1):
        raise ValueError(f"config.batch_size ({config.batch_size}) must divide over the "
                         f"{workers - 1} survivors as well")
    stop = threading.Event()
    killers = []

    def arm(here, n):   # only the first launch loses a rank
        if n == workers:
            t = threading.Thread(target=_kill_when, args=(here, after_step, lose, stop), daemon=True)
            t.start()
            killers.append(t)
        else:
            stop.set()
    try:
        h, events = train_elastic(config, workers, directory, min_workers=workers - 1,
                                  _on_start=arm, **kw)
    finally:
        stop.set()
        for t in killers:
            t.join()
    if not events:
        raise RuntimeError(f"rank {lose} was not lost: the run ended before the checkpoint of "
                           f"step {after_step}; give a smaller after_step")
    return h, events[0]
