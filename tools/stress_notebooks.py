"""Re-execute notebooks several times, optionally beside a busy core, and report what failed.

    python tools/stress_notebooks.py [--hog] [--runs N] [--json FILE] [paths ...]

Each notebook runs top to bottom in a fresh kernel, as nbval runs it in CI; the stored notebook
is never rewritten. ``--hog`` starts one process that spins on a core for the whole run (a
machine with one core busy), so a claim that only holds on an idle machine shows up here before
it shows up in someone else's CI. Paths default to every notebook under ``book/``; a folder
stands for the notebooks under it. The table lists notebook x run: ``ok (seconds)``, or the
failing cell and the assertion it stopped on; every claim is re-judged against its stored
verdict as CI does (``book/conftest.py``): a failed comparison fails the run, a move under load
is listed. A cell that runs past ``--timeout``, or a kernel
that dies, is retried once and marked in the table: we have seen a fresh kernel sit idle at its
first cell, with nothing of the notebook running, and that says nothing about its claims. The
exit status is the number of failed executions (capped at 100), so a script can tell a clean
sweep.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import re
import signal
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent


# the hog: a separate interpreter keeping one core busy until it is terminated
HOG = "x = 0\nwhile True:\n    x = (x * 1103515245 + 12345) & 0xFFFFFFFF"


def notebooks(paths: list[str]) -> list[pathlib.Path]:
    """The notebooks named by ``paths`` (files, or folders searched recursively), in order."""
    found = []
    for p in map(pathlib.Path, paths or [str(ROOT / "book")]):
        if p.is_dir():
            found += sorted(q for q in p.rglob("*.ipynb") if ".ipynb_checkpoints" not in q.parts)
        elif p.suffix == ".ipynb" and p.exists():
            found.append(p)
        else:
            raise SystemExit(f"paths: {p} is neither a notebook nor a folder")
    return found


def _name(p: pathlib.Path) -> str:
    """The path as the table shows it: relative to the repository where it lies inside it."""
    try:
        return str(p.resolve().relative_to(ROOT))
    except ValueError:
        return str(p)


def failure(nb, err: Exception) -> str:
    """'cell N: <the failing line>: <error>' from an executed notebook that raised."""
    errored = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"
               and any(o.get("output_type") == "error" for o in c.get("outputs", []))]
    where = f"cell {errored[0]}" if errored else "cell ?"
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(err))
    line = ""
    arrows = re.findall(r"^-+> *\d+ (.*)$", text, flags=re.M)
    if arrows:
        line = arrows[-1].strip()
    elif errored:  # a failure before any arrow: show the cell's first assert, if any
        src = nb.cells[errored[0]].source
        line = next((ln.strip() for ln in src.splitlines() if "assert" in ln), "")
    kind = next((ln for ln in reversed(text.strip().splitlines()) if ln.strip()),
                f"{type(err).__name__} (no message)")[:160]
    return f"{where}: {line[:160]} -> {kind}" if line else f"{where}: {kind}"


HUNG = "hung: "  # a cell that timed out or a kernel that died: retried once, and reported


def rejudged(path: pathlib.Path, log: str) -> list[dict]:
    """Each claim the run logged in ``log``, compared with the record the notebook file stores
    (:func:`lab.claims.compare`), as CI compares them (book/conftest.py)."""
    from lab import claims
    from lab.nb import stored_claims
    stored = {r["key"]: r for r in stored_claims(path)}
    return [claims.compare(stored[r["key"]], r) for r in claims.logged(log) if r["key"] in stored]


def run_one(path: pathlib.Path, timeout: int) -> tuple[bool, float, str, list]:
    """Execute one notebook in memory; (passed, seconds, failure text, claims re-judged). A
    claim whose verdict fails its comparison with the stored one fails the run."""
    import os
    import tempfile

    import nbformat
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    from lab import claims
    from lab.nb import run
    nb = nbformat.read(path, as_version=4)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="lab-claims-") as log:
        os.environ[claims.LOG_ENV] = log       # the kernel inherits it
        try:
            run(nb, path.parent, timeout)
        except (CellTimeoutError, DeadKernelError) as err:  # the kernel, not a claim: see main()
            return False, time.perf_counter() - t0, f"{HUNG}{failure(nb, err)}", []
        except Exception as err:  # noqa: BLE001 - any failure of the notebook is a result here
            return False, time.perf_counter() - t0, failure(nb, err), rejudged(path, log)
        finally:
            os.environ.pop(claims.LOG_ENV, None)
        judged = rejudged(path, log)
    bad = [f"claim {r['key']} {r['stored']['verdict']} -> {r['fresh']['verdict']}"
           for r in judged if r["outcome"] == "failed"]
    return not bad, time.perf_counter() - t0, "; ".join(bad), judged


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", help="notebooks or folders (default: book/)")
    ap.add_argument("--runs", type=int, default=3, help="executions of each notebook")
    ap.add_argument("--hog", action="store_true", help="keep one core busy throughout")
    ap.add_argument("--timeout", type=int, default=300,
                    help="seconds per cell; a cell past it (or a dead kernel) is retried once")
    ap.add_argument("--json", help="also write the results to this file")
    a = ap.parse_args(argv)
    if a.runs < 1:
        ap.error(f"--runs must be at least 1, got {a.runs}")
    nbs = notebooks(a.paths)
    hog = subprocess.Popen([sys.executable, "-c", HOG]) if a.hog else None
    # a terminated run still ends its hog (the finally below runs on SystemExit)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    results: dict[str, list] = {_name(p): [] for p in nbs}
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    try:
        for run in range(a.runs):
            for p, key in zip(nbs, results):
                ok, secs, why, judged = run_one(p.resolve(), a.timeout)
                retried = ""
                if why.startswith(HUNG):  # a hung kernel says nothing about the notebook's claims
                    retried, (ok, secs, why, judged) = why, run_one(p.resolve(), a.timeout)
                moved = [f"{r['key']} {r['stored']['verdict']} -> {r['fresh']['verdict']}"
                         for r in judged if r["outcome"] == "moved"]
                results[key].append({"ok": ok, "s": round(secs, 1), "failure": why,
                                     "retried_after": retried, "moved": moved})
                print(f"run {run + 1}/{a.runs} {key}: " + (f"ok {secs:.0f} s" if ok else f"FAILED {why}"),
                      file=sys.stderr, flush=True)
    finally:
        if hog:
            hog.kill()
            hog.wait()
    failed = sum(not r["ok"] for rs in results.values() for r in rs)
    print(f"\n{len(nbs)} notebooks x {a.runs} runs, hog={'on' if a.hog else 'off'}, started {started}\n")
    print("| notebook | " + " | ".join(f"run {i + 1}" for i in range(a.runs)) + " |")
    print("|---|" + "---|" * a.runs)
    for key, rs in results.items():
        cells = [(f"ok ({r['s']:.0f} s)" if r["ok"] else "**FAIL** " + r["failure"].replace("|", "/"))
                 + (" (retried: the first try hung)" if r.get("retried_after") else "")
                 + "".join(f"; moved under load: {m}" for m in r.get("moved", [])) for r in rs]
        print(f"| {key} | " + " | ".join(cells) + " |")
    total = len(nbs) * a.runs
    hung = sum(bool(r.get("retried_after")) for rs in results.values() for r in rs)
    print(f"\n{total - failed} passed, {failed} failed" + (f" ({hung} retried after a hang)" if hung else ""))
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(
            {"hog": a.hog, "runs": a.runs, "started": started, "results": results}, indent=1))
    return min(failed, 100)


if __name__ == "__main__":
    sys.exit(main())
