"""What ``train`` and ``pipeline`` share on the command line: the checkpoint flags, the out
folder (history.json, history.csv, plot.png) and what a failed run leaves there."""
from __future__ import annotations

import os
import pathlib
import sys
import tempfile

from .args import folder, integer
from .formatting import quiet, tell_torchrun


def add_checkpoint_flags(p) -> None:
    """``--checkpoint-every N`` and ``--resume DIR`` on parser ``p``."""
    p.add_argument("--checkpoint-every", type=integer(0), default=0, metavar="N",
                   help="write a checkpoint every N steps into OUT/checkpoint (0: none)")
    p.add_argument("--resume", type=folder, default=None, metavar="DIR",
                   help="continue the run checkpointed in DIR (an --out folder or its "
                        "checkpoint/ subfolder)")


def checkpoint_kw(a) -> dict:
    """The checkpoint keywords of ``train`` for parsed flags ``a`` (none when neither flag is
    given, so a plain run calls ``train`` as before)."""
    kw = {}
    if a.checkpoint_every:
        kw.update(checkpoint_every=a.checkpoint_every,
                  checkpoint_dir=pathlib.Path(a.out) / "checkpoint")
    if a.resume is not None:
        inner = a.resume / "checkpoint"
        kw["resume"] = inner if inner.is_dir() else a.resume
    return kw


def _say_once(line: str) -> None:
    """``line`` on stderr, under torchrun once per node (``lab.cli.formatting.quiet``), and
    in torchrun's error file."""
    tell_torchrun(line)
    if not quiet():
        print(line, file=sys.stderr)


def refused(e) -> int:
    """A configuration refused before anything ran: say why on stderr (under torchrun, once
    per node); exit status 2."""
    _say_once(f"error: {e}")
    return 2


def out_refused(out) -> bool:
    """Check, before anything runs, that folder ``out`` can take the run's files (it is created
    if needed); if not, say why in one line on stderr (under torchrun, once per node) and
    return True (exit status 2)."""
    why = out_problem(out)
    if why is not None:
        _say_once(f"error: --out {out} {why}")
    return why is not None


def out_problem(out) -> str | None:
    """Why ``out`` cannot be the run's folder (a file is in the way, it cannot be made or
    written), as the end of a sentence that starts with it; or None. It is made, and a file
    is written in it and removed, to find out."""
    path = pathlib.Path(out)
    for p in (path, *path.parents):
        if p.exists() and not p.is_dir():
            return ("is a file, not a folder" if p == path else
                    f"cannot be made: {p} is a file, not a folder")
        if p.exists():
            break
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".lab-write-test-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        return (f"cannot be made or written ({e.strerror or e}"
                + (f": {e.filename})" if getattr(e, "filename", None) else ")"))
    return None


def unwritten(e: OSError, out, what: str = "the run finished, but its files") -> int:
    """``what`` could not be written into ``out``: one line on stderr; exit status 1."""
    print(f"error: {what} could not be written into {out}: {e.strerror or e}"
          + (f" ({e.filename})" if getattr(e, "filename", None) else ""), file=sys.stderr)
    return 1


def launched(start, out):
    """``start()``, a training call: its result, or the exit status when the run failed (1:
    what it kept is written into ``out``) or was refused before launch (2: a checkpoint of
    another config, ...)."""
    from ..run import RunFailed
    try:
        return start()
    except RunFailed as e:
        return report_failure(e, out)
    except ValueError as e:
        return refused(e)


def launch_failed(e) -> int:
    """A launch whose rank failed (a :class:`~lab.runtime.LaunchError`), for the commands
    without an --out folder: its first line (which rank, and why) on stderr; exit status 1."""
    print(f"error: the run failed: {str(e).splitlines()[0] if str(e) else type(e).__name__}",
          file=sys.stderr)
    return 1


def rank_failed(e: BaseException, rank: int, world_size: int, out) -> int:
    """Under torchrun, this rank raised ``e``: one line on stderr, as a launched run's failure
    reads (``error: the run failed: rank R of W failed: TYPE: MESSAGE``), the traceback kept in
    ``out``/error-rankR.json (each failing rank its own file: on a shared folder they would
    overwrite one another) and the line given to torchrun's error file, so that its failure
    summary names the cause; exit status 1."""
    import json
    import traceback
    kind = type(e).__qualname__ if type(e).__module__ == "builtins" else \
        f"{type(e).__module__}.{type(e).__qualname__}"
    said = str(e).strip().splitlines()
    cause = f"rank {rank} of {world_size} failed: {kind}" + (f": {said[0]}" if said else "")
    print(f"error: the run failed: {cause}", file=sys.stderr)
    path = pathlib.Path(out) / f"error-rank{rank}.json"
    try:
        path.write_text(json.dumps({"rank": rank, "cause": cause,
                                    "traceback": "".join(traceback.format_exception(e))},
                                   indent=1))
        print(f"kept: {path}", file=sys.stderr)
    except OSError as err:
        unwritten(err, out, f"rank {rank}'s error")
    tell_torchrun(cause)
    return 1


def summary(histories) -> str:
    """The runs' summaries (:meth:`lab.run.History.summary`) as two tables that fit in 100
    columns: what each run did (loss, accuracy, bytes per step), then its milliseconds per step
    (compute, codec, communication measured and modeled), one row per run in each."""
    from ..textable import format_rows
    rows = [h.summary() for h in histories]
    ms = " ms/step"
    first = [{k: v for k, v in r.items() if not k.endswith(ms)} for r in rows]
    times = [{"run": r["run"], **{k[:-len(ms)]: v for k, v in r.items() if k.endswith(ms)}}
             for r in rows]
    return f"{format_rows(first)}\n\nms per step:\n{format_rows(times)}"


def report_failure(e, out) -> int:
    """Save what the failed run kept into ``out`` and say where, on stderr; exit status 1."""
    try:
        paths = e.save(out)
    except OSError as err:
        print(f"\nerror: the run failed: {e.error['cause']}", file=sys.stderr)
        return unwritten(err, out, "what the failed run kept")
    print(f"\nerror: the run failed: {e.error['cause']}", file=sys.stderr)
    if paths:
        print("kept: " + ", ".join(str(p) for p in paths), file=sys.stderr)
    if e.history is None:
        print("no step completed, so there is no history", file=sys.stderr)
    return 1


def write_history(hist, out, title: str | None = None) -> list[pathlib.Path]:
    """history.json, history.csv and plot.png of ``hist`` into folder ``out``."""
    from ..viz import plot_history
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "history.json", out / "history.csv", out / "plot.png"]
    hist.to_json(paths[0])
    hist.to_csv(paths[1])
    plot_history([hist], path=paths[2], **({"title": title} if title else {}))
    return paths
