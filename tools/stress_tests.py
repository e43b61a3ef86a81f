"""Run the unit tests several times beside CPU hogs, and report what failed.

    python tools/stress_tests.py [--hogs 1 2] [--runs 3] [--json FILE] [-- PYTEST ARGS ...]

The command is the README's own unit-test line (the block CI runs), so a test that passes only on
an idle machine shows up here before it shows up in someone else's CI. For each hog count, that
many processes spin on a core for the whole run (``stress_notebooks.HOG``); each run's failures
are read from pytest's JUnit XML. Extra pytest arguments after ``--`` narrow the run (a file, a
``-k``). The table lists hogs x run: passed, failed and the failing tests; the exit status is the
number of runs with a failure.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import shlex
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from stress_notebooks import HOG  # noqa: E402


def readme_unit_command() -> list[str]:
    """The README's unit-test line (under its CI marker): the pytest line that runs ``tests``."""
    text = (ROOT / "README.md").read_text(encoding="utf8")
    block = text.split("<!-- ci: test commands -->", 1)[1].split("```")[1].splitlines()[1:]
    line = next(ln for ln in block if "pytest" in ln and ln.split()[-1] == "tests")
    return shlex.split(line)


def failures(junit: pathlib.Path) -> tuple[int, list[str]]:
    """(tests run, ids of those that failed or errored) from a JUnit XML file."""
    root = ET.parse(junit).getroot()
    cases = list(root.iter("testcase"))
    bad = [f"{c.get('classname', '').replace('.', '/')}.py::{c.get('name')}" for c in cases
           if c.find("failure") is not None or c.find("error") is not None]
    return len(cases), bad


def run_once(hogs: int, extra: list[str]) -> dict:
    procs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(hogs)]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            junit = pathlib.Path(tmp) / "junit.xml"
            cmd = readme_unit_command() + extra + [f"--junitxml={junit}"]
            if cmd[0] == "python":
                cmd[0] = sys.executable
            t0 = time.perf_counter()
            rc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL).returncode
            secs = time.perf_counter() - t0
            n, bad = failures(junit) if junit.exists() else (0, ["(no JUnit report)"])
    finally:
        for p in procs:
            p.kill()
            p.wait()
    return {"hogs": hogs, "rc": rc, "s": round(secs), "tests": n, "failed": bad}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hogs", type=int, nargs="+", default=[1, 2], help="hog counts to run beside")
    ap.add_argument("--runs", type=int, default=3, help="runs per hog count")
    ap.add_argument("--json", help="also write the results to this file")
    a = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if a.runs < 1 or any(h < 0 for h in a.hogs):
        ap.error(f"--runs must be >= 1 and --hogs >= 0, got {a.runs} and {a.hogs}")
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    results = []
    for hogs in a.hogs:
        for r in range(a.runs):
            res = run_once(hogs, extra)
            results.append(res)
            print(f"hogs {hogs} run {r + 1}: {res['tests']} tests, {len(res['failed'])} failed "
                  f"({res['s']} s) {' '.join(res['failed'])}", file=sys.stderr, flush=True)
    print(f"\nunit tests x {a.runs} runs beside {a.hogs} hog(s), started {started}: "
          f"{' '.join(readme_unit_command() + extra)}\n")
    print("| hogs | run | tests | failed | seconds | failing tests |\n|---|---|---|---|---|---|")
    for i, res in enumerate(results):
        print(f"| {res['hogs']} | {i % a.runs + 1} | {res['tests']} | {len(res['failed'])} | "
              f"{res['s']} | {', '.join(res['failed']) or '-'} |")
    red = sum(bool(res["failed"]) or res["rc"] != 0 for res in results)
    print(f"\n{len(results) - red} passed, {red} failed")
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps({"started": started, "runs": results}, indent=1))
    return min(red, 100)


if __name__ == "__main__":
    sys.exit(main())
