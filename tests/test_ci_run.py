""".ci/run stops at its first red step: run on scratch clones whose README test block, book build
or checks are stand-ins, it must exit non-zero at the failing step and run nothing after it."""
import os
import pathlib
import shutil
import stat
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent

STUBS = {  # the later steps' commands, as stand-ins that leave a mark of having run
    "bin/jupyter-book": "#!/bin/sh\ntouch \"$MARKS/book\"\nexit ${BOOK_RC:-0}\n",
    "tools/check_offline_math.py": "import os, pathlib; pathlib.Path(os.environ['MARKS'], 'math').touch()\n",
    "tools/check_pages.py": "import os, pathlib; pathlib.Path(os.environ['MARKS'], 'pages').touch()\n",
    "tools/check_wheel.sh": "#!/bin/sh\ntouch \"$MARKS/wheel\"\n",
}


def _clone(tmp: pathlib.Path, block: list[str], test_src: str | None) -> pathlib.Path:
    repo = tmp / "clone"
    (repo / ".ci").mkdir(parents=True)
    shutil.copy(ROOT / ".ci" / "run", repo / ".ci" / "run")
    fence = "```"
    (repo / "README.md").write_text("# scratch\n\nRun the tests:\n\n<!-- ci: test commands -->\n"
                                    f"{fence}bash\n" + "\n".join(block) + f"\n{fence}\n")
    if test_src is not None:
        (repo / "tests").mkdir()
        (repo / "tests" / "test_one.py").write_text(test_src)
    for rel, text in STUBS.items():
        p = repo / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        p.chmod(p.stat().st_mode | stat.S_IXUSR)
    (tmp / "marks").mkdir()
    return repo


def _ci(repo: pathlib.Path, **env) -> tuple[subprocess.CompletedProcess, set[str]]:
    marks = repo.parent / "marks"
    path = f"{repo / 'bin'}{os.pathsep}{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    out = subprocess.run(["bash", str(repo / ".ci" / "run")], capture_output=True, text=True,
                         timeout=240, env={**os.environ, "PATH": path, "MARKS": str(marks), **env})
    return out, {p.name for p in marks.iterdir()}


PYTEST = "python -m pytest -q -p no:cacheprovider tests"


def test_a_failing_unit_test_stops_ci_before_the_book_is_built(tmp_path):
    repo = _clone(tmp_path, ["echo installing", PYTEST, "touch \"$MARKS/notebooks\""],
                  "def test_red():\n    assert 1 == 2\n")
    out, marks = _ci(repo)
    assert out.returncode == 1, out.stdout[-3000:]
    assert "1 failed" in out.stdout and 'CI failed at step "README: python -m pytest' in out.stdout
    assert marks == set()                       # no notebooks, no book, no checks, no wheel
    assert "FAILED (exit 1)" in out.stdout and "total" in out.stdout   # the step times still print


def test_a_test_run_that_collects_nothing_is_red(tmp_path):
    repo = _clone(tmp_path, [PYTEST], "")
    out, marks = _ci(repo)
    assert out.returncode == 5 and marks == set(), out.stdout[-3000:]


def test_a_failing_book_build_stops_ci_before_the_checks(tmp_path):
    repo = _clone(tmp_path, [PYTEST], "def test_green():\n    assert True\n")
    out, marks = _ci(repo, BOOK_RC="3")
    assert out.returncode == 3 and marks == {"book"}, out.stdout[-3000:]


def test_every_step_runs_and_is_timed_when_all_pass(tmp_path):
    repo = _clone(tmp_path, ["export SCRATCH_CI=1", "test \"$SCRATCH_CI\" = 1", PYTEST],
                  "def test_green():\n    assert True\n")
    out, marks = _ci(repo)
    assert out.returncode == 0, out.stdout[-3000:]
    assert marks == {"book", "math", "pages", "wheel"}
    assert out.stdout.rstrip().endswith("CI passed.")
    times = out.stdout[out.stdout.index("CI steps (seconds):"):]
    assert times.count("\n  ") >= 7            # 3 README lines, book, math, pages, wheel, total


def test_the_readme_block_is_what_ci_runs():
    text = (ROOT / "README.md").read_text()
    block = text.split("<!-- ci: test commands -->", 1)[1].split("```")[1].splitlines()[1:]
    lines = [ln for ln in block if ln.strip()]
    assert any("--nbval-lax book" in ln for ln in lines) and any(ln.endswith(" tests") for ln in lines)
    assert not any("&&" in ln for ln in lines)  # one command a step
