"""A worker lost between outer steps: the run goes on with the survivors from the last checkpoint.

What torchft exists for, in its smallest restart-based form (the torchelastic way, not torchft's
in-place quorum): a data-parallel run checkpoints at every outer step (``checkpoint_every = H``);
when a rank dies, the launch fails (:class:`~lab.run.RunFailed`); the newest complete checkpoint
is re-formed for the surviving ranks (the lost rank's file dropped, the others renumbered, the
world size lowered) and the run resumes on them. After a DiLoCo outer step every rank holds the
same parameters and outer state, so nothing of the model is lost; the lost rank's inner steps
since that outer step are, and they are redone. No data is lost: a step's global batch is drawn
from (seed, step) and split over however many ranks there are (:meth:`lab.data.Dataset.batch`),
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


def train_losing_a_worker(config, workers: int, lose: int, after_step: int, directory, **kw):
    """Train ``config`` (a DiLoCo-style run) on ``workers`` ranks, checkpointing every outer
    step, kill rank ``lose`` once the checkpoint of step ``after_step`` (or a later one) exists,
    and go on with the ``workers - 1`` survivors from the newest checkpoint. Returns
    ``(history, event)``: one History of all steps (its loss the mean over the ranks there
    were at each step) and ``event`` = ``{"lost_rank", "resumed_from_step", "workers_after", "cause"}``."""
    h_outer = (config.averaging_kw or {}).get("period")
    if not h_outer:
        raise ValueError("config: an averaging scheme with a period (diloco, streaming_diloco, "
                         "local) is needed, its outer step is where the run re-forms")
    if not 0 < lose < workers:
        raise ValueError(f"lose must be a rank in [1, {workers}) (rank 0 keeps the run's "
                         f"evaluation and history), got {lose}")
    if config.batch_size % (workers - 1):
        raise ValueError(f"config.batch_size ({config.batch_size}) must divide over the "
                         f"{workers - 1} survivors as well")
    root = Path(directory)
    first, after = root / f"{workers}-ranks", root / f"{workers - 1}-ranks"
    stop = threading.Event()
    killer = threading.Thread(target=_kill_when, args=(first, after_step, lose, stop), daemon=True)
    killer.start()
    try:
        train(config, workers, checkpoint_every=h_outer, checkpoint_dir=first, **kw)
    except RunFailed as err:
        cause = err.error["cause"]
    else:
        raise RuntimeError(f"rank {lose} was not lost: the run ended before the checkpoint of "
                           f"step {after_step}; give a smaller after_step")
    finally:
        stop.set()
        killer.join()
    last = latest(first)
    step = read_meta(last)["step"]
    # the loss before the fault is the mean over all ranks then, not over the survivors
    before = [load(last, r)["history"].loss for r in range(workers)]
    shrink(last, lose, after)
    h = train(config, workers - 1, resume=after, checkpoint_every=h_outer,
              checkpoint_dir=after, **kw)
    h.loss[:step] = [sum(x) / workers for x in zip(*before)]
    event = {"lost_rank": lose, "resumed_from_step": step,
             "workers_after": workers - 1, "cause": cause}
    return h, event
