"""The command line (``lab.cli``): every flag has help text, bad names and numbers are named at
parse time (a did-you-mean, a pointer to the flag a name of another kind belongs to, the
range a number must be in), and the command line lives in one room."""
import argparse
import ast
import importlib
import json
import pathlib
import subprocess
import sys

import pytest

from lab.cli import COMMANDS, main
from lab.cli.args import name_of
from lab.cli.bench import BUILTIN, plugins

LAB = pathlib.Path(__file__).resolve().parents[1] / "lab"


def _flags_without_help(p: argparse.ArgumentParser) -> list[str]:
    return [a.option_strings[0] if a.option_strings else a.dest for a in p._actions
            if not (a.help and a.help.strip()) and a.help is not argparse.SUPPRESS]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_flag_of_every_subcommand_has_help_text(command):
    p = importlib.import_module(f"lab.cli.{command}").parser()
    assert len(p._actions) > 1 or command == "list"
    assert _flags_without_help(p) == []
    assert p.format_help()  # no stray '%' in a help text


class _Parsed(Exception):
    pass


@pytest.mark.parametrize("bench", [b for b in (*BUILTIN, *plugins()) if b not in ("launch", "collectives")])
def test_every_flag_of_every_benchmark_has_help_text(bench, monkeypatch):
    """Each benchmark module builds its own parser in ``main``: stop it at parse time."""
    seen = []

    def stop(self, args=None, namespace=None):
        seen.append(self)
        raise _Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", stop)
    with pytest.raises(_Parsed):
        importlib.import_module(f"lab.bench.{bench}").main([])
    assert _flags_without_help(seen[0]) == []


def test_the_checks_can_fail():
    p = argparse.ArgumentParser()
    p.add_argument("--bare")
    p.add_argument("--fine", help="documented")
    assert _flags_without_help(p) == ["--bare"]


def _error(argv, capsys) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("argv, flag, hint", [
    (["train", "--compressor", "topkk"], "--compressor", "did you mean 'topk'?"),
    (["train", "--aggregator", "krumm"], "--aggregator", "did you mean 'krum'?"),
    (["train", "--aggregator", "adaptive-topk"], "--aggregator", "did you mean 'adaptive_topk'?"),
    (["train", "--schedule", "priority_only"], "--schedule", "did you mean 'priority-only'?"),
    (["train", "--sync", "sssp"], "--sync", "did you mean 'ssp'?"),
    (["train", "--averaging", "easdg"], "--averaging", "did you mean 'easgd'?"),
    (["train", "--attack", "ALIE"], "--attack", "did you mean 'alie'?"),
    (["train", "--model", "resnt"], "--model", "did you mean 'resnet'?"),
    (["train", "--data", "digit"], "--data", "did you mean 'digits'?"),
    (["train", "--network", "1gbsp"], "--network", "did you mean '1gbps'?"),
    (["train", "--aggregator", "atomoo"], "--aggregator",
     "did you mean the compressor 'atomo' (--compressor atomo)?"),
    (["pipeline", "--dp", "sparse_avg"], "--dp", "did you mean 'sparse-avg'?"),
    (["pipeline", "--schedule", "1f1f"], "--schedule", "did you mean '1f1b'?"),
    (["hogwild", "--problem", "spars"], "--problem", "did you mean 'sparse'?"),
    (["ensemble", "--model", "mpl"], "--model", "did you mean 'mlp'?"),
])
def test_a_misspelt_name_gets_a_did_you_mean(argv, flag, hint, capsys):
    err = _error(argv, capsys)
    assert f"argument {flag}: unknown" in err and hint in err, err


def test_an_unknown_command_gets_a_did_you_mean(capsys):
    err = _error(["trian"], capsys)
    assert "unknown command 'trian'; did you mean 'train'?" in err


@pytest.mark.parametrize("argv, says, use", [
    (["train", "--aggregator", "atomo"], "'atomo' is a compressor, not an aggregator",
     "--compressor atomo"),
    (["train", "--compressor", "krum"], "'krum' is an aggregator, not a compressor",
     "--aggregator krum"),
    (["train", "--compressor", "powersgd"], "is an aggregator", "--aggregator powersgd"),
    (["train", "--aggregator", "bsp"], "is a sync mode", "--sync bsp"),
    (["train", "--model", "digits"], "is a data set", "--data digits"),
    (["train", "--schedule", "gpipe"], "is a pipeline schedule",
     "python -m lab pipeline --schedule gpipe"),
    (["pipeline", "--schedule", "p3"], "is a data-parallel schedule",
     "python -m lab train --schedule p3"),
    (["train", "--optimizer", "adamw"], "is a pipeline optimizer",
     "python -m lab pipeline --optimizer adamw"),
    (["train", "--network", "topk"], "is a compressor", "--compressor topk"),
])
def test_a_name_of_the_wrong_kind_points_to_its_flag(argv, says, use, capsys):
    err = _error(argv, capsys)
    assert says in err and f"use {use}" in err, err
    cmd, *rest = use.split()[3:] if use.startswith("python") else [argv[0], *use.split()]
    mod = importlib.import_module(f"lab.cli.{cmd}")
    a = mod.parser().parse_args(rest)  # the pointer is right: its flag takes the name
    assert getattr(a, rest[0][2:].replace("-", "_")) == rest[1]


def test_none_is_never_pointed_elsewhere_and_names_parse(capsys):
    err = _error(["train", "--aggregator", "none"], capsys)
    assert "unknown aggregator 'none'" in err and "use" not in err and "auto" in err
    assert name_of("compressor", "topk") == "topk"
    assert name_of("aggregator", "auto", extra=("auto",)) == "auto"
    with pytest.raises(argparse.ArgumentTypeError, match="is a compressor"):
        name_of("aggregator", "atomo")


@pytest.mark.parametrize("argv, flag, rng", [
    (["train", "--workers", "0"], "--workers", "must be an int >= 1, got 0"),
    (["train", "--steps", "-1"], "--steps", "must be an int >= 1, got -1"),
    (["train", "--batch-size", "0"], "--batch-size", ">= 1"),
    (["train", "--lr", "-1"], "--lr", "must be a finite number > 0, got -1"),
    (["train", "--lr", "nan"], "--lr", "> 0"),
    (["train", "--momentum", "1"], "--momentum", "in [0, 1)"),
    (["train", "--jitter", "-0.1"], "--jitter", "must be a finite number >= 0, got -0.1"),
    (["train", "--eval-every", "-1"], "--eval-every", "must be an int >= 0"),
    (["train", "--byzantine", "-1"], "--byzantine", ">= 0"),
    (["train", "--timeout", "0"], "--timeout", "> 0"),
    (["train", "--workers", "two"], "--workers", "must be an int >= 1, got 'two'"),
    (["train", "--checkpoint-every", "-2"], "--checkpoint-every", ">= 0"),
    (["train", "--slow-ranks", "1=0.5"], "--slow-ranks", "FACTOR a number >= 1"),
    (["train", "--compressor-kw", "density"], "--compressor-kw", "key=value"),
    (["pipeline", "--stages", "0"], "--stages", ">= 1"),
    (["pipeline", "--beta1", "1"], "--beta1", "in [0, 1)"),
    (["pipeline", "--clip", "0"], "--clip", "> 0"),
    (["pipeline", "--warmup", "-1"], "--warmup", ">= 0"),
    (["pipeline", "--weight-decay", "-0.1"], "--weight-decay", ">= 0"),
    (["advise", "--workers", "1"], "--workers", "must be an int >= 2"),
    (["advise", "--target", "1.5"], "--target", "in (0, 1]"),
    (["hogwild", "--processes", "0"], "--processes", ">= 1"),
    (["ensemble", "--distill-steps", "-1"], "--distill-steps", ">= 0"),
])
def test_a_number_out_of_range_says_the_range(argv, flag, rng, capsys):
    err = _error(argv, capsys)
    assert f"argument {flag}: " in err and rng in err, err


def test_bad_input_stops_before_any_process_starts(monkeypatch, capsys):
    import lab.runtime
    import lab.train

    def never(*a, **k):
        raise AssertionError("a process was started")

    monkeypatch.setattr(lab.train, "train", never)
    monkeypatch.setattr(lab.runtime, "launch", never)
    for argv in (["train", "--aggregator", "atomo"], ["train", "--workers", "0"],
                 ["train", "--network", "fast"], ["train", "--resume", "/no/such/run"]):
        _error(argv, capsys)
    assert main(["train", "--workers", "3"]) == 2  # batch 64 on 3 ranks: TrainConfig says so
    assert "divisible" in capsys.readouterr().err


def test_checkpoint_flags_name_the_folders(tmp_path):
    from lab.cli import pipeline, train
    from lab.cli.runs import checkpoint_kw
    for mod in (train, pipeline):
        a = mod.parser().parse_args(["--checkpoint-every", "5", "--out", str(tmp_path / "run")])
        assert checkpoint_kw(a) == {"checkpoint_every": 5,
                                    "checkpoint_dir": tmp_path / "run" / "checkpoint"}
        assert checkpoint_kw(mod.parser().parse_args([])) == {}  # a plain run: as before
        a = mod.parser().parse_args(["--resume", str(tmp_path)])
        assert checkpoint_kw(a) == {"resume": tmp_path}  # a checkpoint folder itself
        (tmp_path / "checkpoint").mkdir(exist_ok=True)
        assert checkpoint_kw(a) == {"resume": tmp_path / "checkpoint"}  # an --out folder
        (tmp_path / "checkpoint").rmdir()
        helps = {x.dest: x.help for x in mod.parser()._actions}
        assert helps["checkpoint_every"].startswith("write a checkpoint every N steps into OUT/checkpoint")
        assert helps["resume"] == ("continue the run checkpointed in DIR (an --out folder or its "
                                   "checkpoint/ subfolder)")


def test_a_failed_run_keeps_its_error_and_says_where(tmp_path, capsys):
    """A real run whose loss blows up (lr 1e30): exit status 1, error.json in --out, named."""
    out = tmp_path / "run"
    assert main(["train", "--workers", "1", "--steps", "5", "--lr", "1e30", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    error = json.loads((out / "error.json").read_text())
    assert error["rank"] == 0 and "loss is nan" in error["cause"] and "Traceback" in error["traceback"]
    assert "error: the run failed: " in err and "kept: " in err and str(out / "error.json") in err
    assert not (out / "plot.png").exists()


def test_top_level_help_lists_every_command(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert all(c in out for c in COMMANDS)
    assert main(["list"]) == 0 and "compressors:" in capsys.readouterr().out


def _imports(path: pathlib.Path) -> set[str]:
    """Modules ``path`` imports, relative imports resolved (``from .. import cli`` counts as
    ``lab.cli``)."""
    package = ".".join(path.relative_to(LAB.parent).with_suffix("").parts)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {n.name for n in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level \
                else []
            mod = ".".join([*base, *([node.module] if node.module else [])])
            out |= {mod} | {f"{mod}.{n.name}" for n in node.names}
    return out


def test_nothing_outside_the_cli_imports_it():
    shims = {LAB / "__main__.py", LAB / "bench" / "__main__.py"}
    bad = [str(p.relative_to(LAB.parent)) for p in LAB.rglob("*.py")
           if LAB / "cli" not in p.parents and p not in shims
           and any(m == "lab.__main__" or m == "lab.cli" or m.startswith("lab.cli.")
                   for m in _imports(p))]
    assert bad == []
    assert "lab.cli.bench" in _imports(LAB / "bench" / "__main__.py")  # the resolver works
    assert "lab.cli" in _imports(LAB / "__main__.py")
    for sub in ("sync", "averaging", "pipeline", "advise"):
        assert list((LAB / sub).glob("*cli*.py")) == [], sub


def test_python_m_lab_and_python_m_lab_bench_run_as_programs():
    r = subprocess.run([sys.executable, "-m", "lab", "train", "--aggregator", "atomo"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "use --compressor atomo" in r.stderr, r.stderr
    r = subprocess.run([sys.executable, "-m", "lab.bench", "--help"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "python -m lab bench" in r.stdout, r.stderr
