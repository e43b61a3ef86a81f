"""The command line for a new user (issue 41, items 7 and 11): every --help lists defaults,
bench and lab.nb say what they do, a link without a unit is told so, a bad --out and Ctrl-C
end in one line with the documented exit status, a diverged run fails."""
import argparse
import importlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from lab.cli import COMMANDS, main
from lab.cli.bench import BUILTIN, plugins
from lab.cli.formatting import EXIT_STATUS, HelpFormatter, shows_default

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("command", COMMANDS)
def test_every_subcommands_help_lists_its_defaults_and_exit_statuses(command):
    p = importlib.import_module(f"lab.cli.{command}").parser()
    fmt = HelpFormatter(p.prog)
    missing = [a.option_strings or a.dest for a in p._actions
               if shows_default(a) and "default" not in fmt._get_help_string(a).lower()]
    assert missing == []
    text = " ".join(p.format_help().split())   # as read, not as wrapped
    assert "exit status: 0 done" in text
    if command == "train":
        assert "(default: 0.1)" in text and "(default: runs/latest)" in text


def test_a_flag_that_is_off_or_none_by_default_shows_no_default():
    p = argparse.ArgumentParser(formatter_class=HelpFormatter)
    p.add_argument("--on", action="store_true", help="a switch")
    p.add_argument("--link", default=None, help="a link")
    p.add_argument("--lr", type=float, default=0.5, help="a rate")
    text = p.format_help()
    assert "(default: 0.5)" in text and text.count("default") == 1


def test_bench_help_lists_every_benchmark_it_runs(capsys):
    with pytest.raises(SystemExit) as e:
        main(["bench", "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and "four built-in" not in out.lower()
    listed = [line.split()[0] for line in out.split("benchmarks:\n", 1)[1].splitlines()
              if line.startswith("  ")]
    assert listed == [*BUILTIN, *plugins(), "all"]
    assert EXIT_STATUS.splitlines()[0] in out


def _run(*argv, **kw):
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=ROOT,
                          timeout=kw.pop("timeout", 300), **kw)


def test_lab_nb_help_and_a_path_that_is_not_a_notebook():
    r = _run("-m", "lab.nb", "--help")
    assert r.returncode == 0 and "usage: python -m lab.nb" in r.stdout and not r.stderr.strip()
    r = _run("-m", "lab.nb", "no/such.ipynb")
    assert r.returncode == 2 and "not a notebook file: no/such.ipynb" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("link, says", [
    ("100Mbps,2", "the latency '2' of '100Mbps,2' needs a unit"),
    ("100,2ms", "the bandwidth '100' of '100,2ms' needs a unit")])
def test_a_link_number_without_its_unit_is_told_so(link, says, capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", "--network", link])
    err = capsys.readouterr().err
    assert e.value.code == 2 and says in err and "did you mean" not in err


def test_a_bad_out_is_refused_in_one_line_before_anything_runs(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    cases = {str(afile): "is a file, not a folder",
             str(afile / "run"): f"cannot be made: {afile} is a file, not a folder",
             "/proc/lab-no-such/run": "cannot be made or written"}
    for out, says in cases.items():
        assert main(["train", "--steps", "1", "--out", out]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"error: --out {out} ") and says in err[0]
    assert afile.read_text() == "x"


def test_a_diverged_run_fails_and_keep_diverging_runs_on(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--lr", "1e6", "--steps", "20", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "the run diverged" in err and "--keep-diverging" in err
    error = json.loads((out / "error.json").read_text())
    assert "times its first" in error["cause"] and (out / "history.json").exists()
    assert main(["train", "--lr", "1e6", "--steps", "20", "--keep-diverging",
                 "--out", str(tmp_path / "on")]) == 0


def _ranks_of(pid):
    """Processes below ``pid`` that run a launch's rank (forked from the forkserver)."""
    out = subprocess.run(["ps", "-eo", "pid=,ppid="], capture_output=True, text=True).stdout
    parents = {int(a): int(b) for a, b in (line.split() for line in out.splitlines())}
    below, todo = set(), [pid]
    while todo:
        p = todo.pop()
        kids = {c for c, pp in parents.items() if pp == p}
        todo.extend(kids - below)
        below |= kids
    return below


def _interrupt(tmp_path):
    """Start a long training from the shell, Ctrl-C it once its ranks run; (exit status,
    stderr, the processes that were below it), or None if it did not end within 60 s."""
    run = subprocess.Popen([sys.executable, "-m", "lab", "train", "--steps", "1000000",
                            "--eval-every", "0", "--out", str(tmp_path)], cwd=ROOT,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True,   # its own terminal group, as a shell gives
                           # and Ctrl-C's default action, as a shell gives its foreground job:
                           # a child inherits an ignored SIGINT, and Python then installs no
                           # KeyboardInterrupt (a test runner's worker may ignore it)
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        end = time.monotonic() + 120
        while len(_ranks_of(run.pid)) < 4:     # forkserver, resource tracker, two ranks
            assert run.poll() is None and time.monotonic() < end, run.stderr.read()
            time.sleep(0.2)
        time.sleep(1.0)
        below = _ranks_of(run.pid)
        os.killpg(run.pid, signal.SIGINT)      # what Ctrl-C in a terminal sends
        try:
            _, err = run.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            return None
    finally:
        if run.poll() is None:
            run.kill()
    return run.returncode, err, below


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups, ps")
def test_ctrl_c_ends_every_rank_with_one_line_and_status_130(tmp_path):
    got = _interrupt(tmp_path / "run")
    assert got is not None, "Ctrl-C did not end the run within 60 s"
    code, err, below = got
    lines = [line for line in err.splitlines() if line.strip() and "it/s]" not in line
             and not line.strip().endswith("?it/s]")]
    assert code == 130, err
    assert lines[-1] == "interrupted (Ctrl-C): every rank was ended" and "Traceback" not in err
    time.sleep(0.5)
    assert not [p for p in below if os.path.exists(f"/proc/{p}")
                and open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"]
