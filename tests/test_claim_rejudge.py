"""A re-executed claim is re-judged (book/conftest.py, lab.claims.compare): a steady quantity must
keep its verdict, measured time may move one step (reported), two steps fail the session."""
import json
import os
import pathlib
import shutil
import subprocess
import sys

import nbformat
from lab import claims
from lab.nb import run

ROOT = pathlib.Path(__file__).resolve().parent.parent

CELL = """from lab.nb import claim
claim("{key}", paper="A. Author, 2020, Table 1", claimed="a 2x speedup",
      quantity="speedup", value={value}, holds=(">=", 2.0), in_part=(">=", 1.0),
      substrate="{substrate}", runs=1, measured="the scratch run", why_part="below 2x",
      why_not="no speedup")"""


def _book(tmp: pathlib.Path, cases: dict) -> pathlib.Path:
    """A scratch book, a notebook per case ``{name: (substrate, stored, fresh)}``, each storing
    the verdict of ``stored`` and now computing that of ``fresh``."""
    book = tmp / "book"
    book.mkdir()
    shutil.copy(ROOT / "book" / "conftest.py", book / "conftest.py")
    for name, (substrate, stored, fresh) in cases.items():
        nb = nbformat.v4.new_notebook()
        cell = lambda v: CELL.format(key=name, substrate=substrate, value=v)
        nb.cells = [nbformat.v4.new_code_cell(cell(stored))]
        run(nb, book)                                      # executed, its record stored
        nb.cells[0].source = cell(fresh)
        nbformat.write(nb, book / f"{name}.ipynb")
    return book


def _rejudge(book: pathlib.Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != claims.LOG_ENV}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--nbval-lax",
                           "--rootdir", str(book), *args, str(book)], capture_output=True,
                          text=True, timeout=240, cwd=book, env=env)


def test_a_re_executed_claim_is_judged_against_its_stored_verdict(tmp_path):
    book = _book(tmp_path, {"bytes-same": ("ledger", 2.5, 2.6), "bytes-moved": ("ledger", 2.5, 1.5),
                            "time-one": ("measured", 2.5, 1.5), "time-two": ("measured", 2.5, 0.5)})
    out = _rejudge(book)
    assert out.returncode == 1, out.stdout[-3000:]
    assert "4 passed" in out.stdout                           # every cell itself ran fine
    for line in ("4 claims re-judged: 1 same verdict, 1 moved under load",
                 "FAILED (a steady quantity's verdict changed): bytes-moved: stored 'holds'",
                 "moved under load: time-one: stored 'holds'", "FAILED (moved 2 steps): time-two"):
        assert line in out.stdout, out.stdout[-3000:]


def test_a_move_under_load_passes_and_is_recorded_for_the_claims_page(tmp_path):
    book = _book(tmp_path, {"time-one": ("kernel link", 2.5, 1.5)})
    moves = tmp_path / "moves.json"
    out = _rejudge(book, "--claim-moves", str(moves))
    assert out.returncode == 0, out.stdout[-3000:]
    run_ = json.loads(moves.read_text())["runs"][-1]
    assert run_["compared"] == ["time-one"]
    assert [(m["stored"]["verdict"], m["fresh"]["verdict"]) for m in run_["moved"]] == [
        ("holds", "holds in part")]


def test_compare_counts_steps_and_knows_the_steady_substrates():
    rec = lambda v, s: {"key": "k", "verdict": v, "value": 1.0, "substrate": s}
    assert claims.compare(rec("holds", "ledger"), rec("holds", "ledger"))["outcome"] == "same"
    assert claims.compare(rec("holds", "formula"), rec("holds in part", "formula"))["outcome"] == "failed"
    assert claims.compare(rec("holds", "modeled link"),
                          rec("holds in part", "modeled link"))["outcome"] == "moved"
    assert claims.compare(rec("holds", "modeled link"),
                          rec("does not hold here", "modeled link"))["steps"] == 2
