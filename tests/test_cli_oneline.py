"""The command line for a new user (issue 49, item 5): an argparse error is one line (no usage
block) with exit status 2 in every subcommand; an unknown flag gets a did-you-mean; train's
summary fits in 100 columns; history.csv has history.json's per-step series as its columns;
under torchrun an error is as short as without it (one line per rank, no rank's traceback)."""
import csv
import importlib
import json
import os
import subprocess
import sys

import pytest

from lab.cli import COMMANDS, main
from lab.cli.formatting import shows_default
from lab.cli.runs import summary
from lab.run import History

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: per subcommand, a flag value its parser refuses (a number out of range, an unknown name)
BAD_VALUE = {"train": ["--lr", "-1"], "pipeline": ["--stages", "x"],
             "ensemble": ["--workers", "0"], "hogwild": ["--problem", "nope"],
             "advise": ["--workers", "1"], "list": ["extra"], "bench": ["--no-such-flag"],
             "sim": ["--workers", "1"]}


def _one_line_error(argv, capsys) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    out, err = capsys.readouterr()
    assert e.value.code == 2 and out == "", (out, err)
    lines = err.splitlines()
    assert len(lines) == 1 and "usage:" not in err, err
    return lines[0]


@pytest.mark.parametrize("command", COMMANDS)
def test_an_argparse_error_is_one_line_in_every_subcommand(command, capsys):
    for argv in (BAD_VALUE[command], ["--no-such-flag"]):
        line = _one_line_error([command, *argv], capsys)
        assert line.startswith(f"python -m lab {command}: error: "), line
        assert line.endswith(f"(see python -m lab {command} --help)"), line


def test_the_line_names_the_argument_and_a_misspelt_flag_gets_a_did_you_mean(capsys):
    line = _one_line_error(["train", "--lr", "-1"], capsys)
    assert "argument --lr: must be a finite number > 0, got -1" in line
    line = _one_line_error(["train", "--stpes", "3"], capsys)
    assert "unrecognized arguments: --stpes 3; did you mean --steps?" in line
    line = _one_line_error(["train", "--stpes=3", "--sede", "1"], capsys)
    assert "did you mean --steps for --stpes, --seed for --sede?" in line
    line = _one_line_error(["pipeline", "--stagse", "2"], capsys)
    assert "did you mean --stages?" in line


def test_the_top_level_errors_are_one_line_too(capsys):
    assert "did you mean 'train'?" in _one_line_error(["trian"], capsys)
    assert "the following arguments are required: COMMAND" in _one_line_error([], capsys)
    assert "the command comes first" in _one_line_error(["--steps", "3", "train"], capsys)
    with pytest.raises(SystemExit) as e:   # --help still prints the usage, with status 0
        main(["train", "--help"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith("usage: python -m lab train")


def test_under_torchrun_only_each_nodes_first_rank_says_an_error_every_rank_meets(
        monkeypatch, capsys):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    with pytest.raises(SystemExit) as e:
        main(["train", "--lr", "-1"])
    assert e.value.code == 2 and capsys.readouterr().err == ""
    monkeypatch.setenv("LOCAL_RANK", "0")   # a node's first rank (RANK 1: the second node)
    _one_line_error(["train", "--lr", "-1"], capsys)


@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "bench"])
def test_every_flag_with_a_default_shows_it_in_help(command):
    """A default worth showing is in the help text, and so is a flag's whose default is
    None but means something (the pipeline's --beta1, --dp-network; hogwild's --d)."""
    p = importlib.import_module(f"lab.cli.{command}").parser()
    text = " ".join(p.format_help().split())
    for a in p._actions:
        if shows_default(a) and "default" not in (a.help or "").lower():
            assert f"(default: {a.default})" in text, a.dest
    says = {"pipeline": ["(default: 0.9)", "(default: --network's)"],
            "hogwild": ["(default: 1000 for sparse, 64 for counts)"]}
    assert all(s in text for s in says.get(command, [])), text


def _history(steps=3, overlapped=True) -> History:
    h = History(config={"compressor": "powersgd"}, world_size=64, loss=[2.3] * steps,
                bytes=[123_456_789] * steps, recv_bytes=[987_654_321] * steps,
                wire_sent=[1] * steps, wire_recv=[1] * steps, compute_s=[1234.5] * steps,
                codec_s=[12.5] * steps, comm_s=[99999.9] * steps,
                modeled_comm_s=[88888.8] * steps, eval_step=[steps], test_loss=[0.5],
                test_acc=[0.9375])
    if overlapped:
        h.series["overlapped_comm_s"] = [7777.7] * steps
    return h


def test_the_summary_fits_in_100_columns_and_keeps_every_number():
    h = _history()
    text = summary([h])
    assert max(len(line) for line in text.splitlines()) <= 100, text
    for key, value in h.summary().items():   # every number of the summary is printed
        assert str(value) in text, key
    assert "bytes/step" in text and "overlapped comm" in text and "ms per step" in text


def test_history_csv_has_the_per_step_series_of_history_json(tmp_path, capsys):
    """A tiny real run: history.csv's columns are history.json's per-step series (every list
    with one value per step, outside ``series``), plus step and the held-out metrics."""
    out = tmp_path / "run"
    assert main(["train", "--steps", "3", "--eval-every", "2", "--network", "1Gbps",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out.split("\nwrote ")[0]   # the tables, not the paths
    assert max(len(line) for line in printed.splitlines()) <= 100, printed
    data = json.loads((out / "history.json").read_text())
    per_step = {k for k, v in data.items()
                if isinstance(v, list) and len(v) == 3 and k != "rank_bytes"}
    with open(out / "history.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    columns = set(rows[0])
    assert columns - {"step", "test_loss", "test_acc"} == per_step
    assert {"recv_bytes", "wire_sent", "wire_recv"} <= columns
    for k in per_step:
        assert [float(r[k]) for r in rows] == pytest.approx([float(v) for v in data[k]]), k
    assert [r["test_acc"] != "" for r in rows] == [False, True, True]  # steps 2 and 3 (the end)


def test_a_series_a_run_did_not_record_keeps_its_column_empty(tmp_path):
    h = _history(2, overlapped=False)
    h.wire_sent, h.wire_recv = [], []
    h.to_csv(tmp_path / "h.csv")
    with open(tmp_path / "h.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 and rows[0]["wire_sent"] == "" and rows[0]["recv_bytes"] == "987654321"


def _torchrun(tmp_path, *argv):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ROOT}
    env.pop("RANK", None), env.pop("WORLD_SIZE", None), env.pop("LOCAL_RANK", None)
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc-per-node", "2", "-m", "lab", "train", *argv,
                           "--out", str(tmp_path / "run")],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=240)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="torchrun on gloo, Linux")
def test_under_torchrun_a_failed_rank_says_it_in_one_line_without_a_traceback(tmp_path):
    """Two ranks on gloo whose loss blows up: each rank that got to say it says it once, in
    one line (its traceback kept in OUT/error-rankR.json); the only traceback left is
    torchrun's own, whose summary names the cause."""
    r = _torchrun(tmp_path, "--lr", "1e6", "--steps", "5", "--eval-every", "0")
    assert r.returncode != 0
    said = [line for line in r.stderr.splitlines() if "error: the run failed: rank" in line]
    assert 1 <= len(said) <= 2, r.stderr
    ranks = [line.split("rank ", 1)[1].split()[0] for line in said]
    assert len(set(ranks)) == len(ranks) and all("Diverged" in line for line in said)
    assert r.stderr.count("Traceback (most recent call last)") <= 1, r.stderr  # torchrun's
    assert "lab/train" not in r.stderr and "[rank" not in r.stderr, r.stderr
    for rank in ranks:
        kept = json.loads((tmp_path / "run" / f"error-rank{rank}.json").read_text())
        assert kept["rank"] == int(rank) and "Traceback" in kept["traceback"]
    assert "traceback : rank " in r.stderr and "times its first" in r.stderr  # the summary


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="torchrun on gloo, Linux")
def test_under_torchrun_a_config_every_rank_refuses_is_said_once(tmp_path):
    r = _torchrun(tmp_path, "--batch-size", "63", "--steps", "2")
    said = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert r.returncode != 0 and len(said) == 1 and "divisible" in said[0], r.stderr
    assert r.stderr.count("Traceback (most recent call last)") <= 1, r.stderr
