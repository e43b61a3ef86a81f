"""Part 10's grid: the held-out scoring is right on hand-made rankings, the CLI names bad input,
and the committed grid and held-out files carry their provenance and agree with their rows.

Nothing here trains: the grid itself is produced by ``python -m lab bench grid`` (minutes).
"""
import json
import math

import pytest

from lab.bench import grid


def test_score_of_a_perfect_and_of_a_reversed_ranking():
    measured = {"a": 1.0, "b": 2.0, "c": 3.0}
    same = grid.score({"a": 10.0, "b": 20.0, "c": 30.0}, measured)
    assert same["spearman"] == 1.0 and same["pick"] == same["best"] == "a" and same["within"]
    rev = grid.score({"a": 3.0, "b": 2.0, "c": 1.0}, measured)
    assert rev["spearman"] == -1.0 and rev["pick"] == "c" and rev["pick_over_best"] == 3.0
    assert not rev["within"]


def test_score_ranks_never_reached_last_and_judges_the_pick_by_measured_time():
    measured = {"a": 1.05, "b": 1.0, "c": None}
    s = grid.score({"a": 1.0, "b": 2.0, "c": math.inf}, measured)
    assert s["pick"] == "a" and s["best"] == "b" and s["within"]     # 5% slower: within 10%
    assert s["spearman"] == pytest.approx(0.5)
    never = grid.score({"a": 1.0, "b": 2.0, "c": 3.0}, {"a": None, "b": 1.0, "c": 2.0})
    assert never["pick_over_best"] == math.inf and not never["within"]


def test_score_and_summary_name_bad_input():
    with pytest.raises(ValueError, match="same >= 2 methods"):
        grid.score({"a": 1.0, "b": 2.0}, {"a": 1.0, "c": 2.0})
    rows = [{"spearman": 1.0, "within": True}, {"spearman": 0.5, "within": False}]
    assert grid.summary(rows) == {"configs": 2, "spearman_mean": 0.75, "spearman_min": 0.5,
                                  "within_share": 0.5}


@pytest.mark.parametrize("argv, msg", [(["--workers", "1"], "--workers"),
                                       (["--repeats", "0"], "--repeats"),
                                       (["--part", "heldout", "--configs", "mlp:6"], "MODEL:WORLD"),
                                       (["--part", "heldout", "--configs", "vgg:4:1Gbps"],
                                        "--configs")])
def test_cli_names_bad_arguments(argv, msg, capsys):
    with pytest.raises(SystemExit):
        grid.main(argv)
    assert msg in capsys.readouterr().err


def test_heldout_configurations_are_not_in_the_timed_grid():
    if not grid.TIMED.exists():
        pytest.skip("grid.json not produced yet")
    rows = json.loads(grid.TIMED.read_text())["rows"]
    measured = {(r["model"], r["world"], r["link"]) for r in rows}
    links = {r["link"] for r in rows}
    for model, world, link in grid.HELDOUT:
        assert (model, world, link) not in measured and link not in links, (model, world, link)
    conv = json.loads(grid.CONVERGENCE.read_text())
    assert any(model not in conv for model, _, _ in grid.HELDOUT)    # one model without curves


@pytest.mark.parametrize("name", ["grid.json", "heldout.json"])
def test_committed_files_say_what_produced_them(name):
    path = grid.TIMED.parent / name
    if not path.exists():
        pytest.skip(f"{name} not produced yet")
    data = json.loads(path.read_text())
    assert not data.get("partial"), f"{name} is a partial run"
    meta = data["_meta"]
    assert meta["command"].startswith("python -m lab bench grid") and meta["machine"]
    if name == "heldout.json":
        for c in data["configs"]:                  # the stored scores follow from the stored times
            again = grid.score(c["predicted"], c["measured"])
            assert again["spearman"] == c["spearman"] and again["pick"] == c["pick"]
        assert grid.summary(data["configs"]) == data["summary"]
