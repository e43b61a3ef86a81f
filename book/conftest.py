"""The notebooks' re-execution (``pytest --nbval-lax book``) re-judges every claim.

Each ``lab.nb.claim`` call in a re-executed notebook appends the record it computed to the folder
``$LAB_CLAIM_LOG`` (one made here for the session; its pytest-xdist workers and their kernels
inherit it). At the end of the session each fresh verdict is compared with the one the committed
notebook stores (:func:`lab.claims.compare`): a claim on a steady quantity (ledger bytes, a
formula, a seeded Monte Carlo, a stored grid) must reproduce its verdict; a claim on measured time
may move by one step (two where both 95% intervals overlap), which is reported as "moved under load"; anything else fails the session,
both records printed. ``--claim-moves FILE`` appends the session's comparison to FILE (the claims
page counts the moves recorded in ``book/claim_moves.json``).
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import tempfile
import time

from lab import claims
from lab.nb import stored_claims

BOOK = pathlib.Path(__file__).resolve().parent


def pytest_addoption(parser):
    parser.addoption("--claim-moves", metavar="FILE", default=None,
                     help="append this session's claim comparison (moves included) to FILE")


def stored_records() -> dict[str, dict]:
    """Every claim record the committed notebooks hold, by key."""
    found = {}
    for path in sorted(BOOK.rglob("*.ipynb")):
        if ".ipynb_checkpoints" in path.parts:
            continue
        for rec in stored_claims(path):
            found[rec["key"]] = {**rec, "notebook": str(path.relative_to(BOOK.parent))}
    return found


def _controller(config) -> bool:
    return not hasattr(config, "workerinput")   # pytest-xdist's workers have it


def pytest_configure(config):
    if not _controller(config) or os.environ.get(claims.LOG_ENV):
        return                                   # a worker, or a log the caller chose
    config._claim_log = tempfile.mkdtemp(prefix="lab-claims-")
    os.environ[claims.LOG_ENV] = config._claim_log
    config._claim_stored = stored_records()


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if not _controller(config) or not hasattr(config, "_claim_log"):
        return
    fresh = {rec["key"]: rec for rec in claims.logged(config._claim_log)}
    stored = config._claim_stored
    config._claim_results = [claims.compare(stored[k], rec) for k, rec in fresh.items()
                             if k in stored]
    config._claim_new = sorted(set(fresh) - set(stored))
    shutil.rmtree(config._claim_log, ignore_errors=True)
    os.environ.pop(claims.LOG_ENV, None)
    moves_file = config.getoption("--claim-moves")
    if moves_file:
        path = pathlib.Path(moves_file)
        data = json.loads(path.read_text()) if path.exists() else {"runs": []}
        data["runs"].append({"date": time.strftime("%Y-%m-%d"), "by": os.environ.get("LAB_MOVES_BY", "pytest"),
                             "compared": sorted(r["key"] for r in config._claim_results),
                             "moved": [r for r in config._claim_results if r["outcome"] != "same"]})
        path.write_text(json.dumps(data, indent=1) + "\n")
    if any(r["outcome"] == "failed" for r in config._claim_results) and session.exitstatus == 0:
        session.exitstatus = 1


def _line(r: dict) -> str:
    s, f = r["stored"], r["fresh"]
    return (f"{r['key']}: stored {s['verdict']!r} ({s['substrate']}, value {s['value']}) -> "
            f"re-executed {f['verdict']!r} ({f['substrate']}, value {f['value']})")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    results = getattr(config, "_claim_results", None)
    if results is None:
        return
    tr = terminalreporter
    tr.section("claims re-judged")
    by = {o: [r for r in results if r["outcome"] == o] for o in ("same", "moved", "failed")}
    tr.write_line(f"{len(results)} claims re-judged: {len(by['same'])} same verdict, "
                  f"{len(by['moved'])} moved under load (measured time: one step, or two with overlapping 95% intervals), "
                  f"{len(by['failed'])} failed")
    for r in by["moved"]:
        tr.write_line(f"  moved under load: {_line(r)}")
    for r in by["failed"]:
        why = "a steady quantity's verdict changed" if r["steady"] else f"moved {r['steps']} steps"
        tr.write_line(f"  FAILED ({why}): {_line(r)}", red=True)
    for k in config._claim_new:
        tr.write_line(f"  new (no stored record to compare): {k}")
