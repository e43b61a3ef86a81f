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


def test_merge_rows_keeps_the_others_and_replaces_the_named_methods():
    old = [{"model": "mlp", "method": "fp32", "t": 1.0}, {"model": "mlp", "method": "async-ps", "t": 9.0},
           {"model": "cnn", "method": "async-ps", "t": 5.0}]
    new = [{"model": "mlp", "method": "async-ps", "t": 2.0}]
    assert grid.merge_rows(old, new, ["async-ps"], ["mlp"]) == [old[0], old[2], new[0]]
    meta = grid.merged_meta({"command": "a"}, {"command": "b"})
    assert meta == {"command": "a", "merges": [{"command": "b"}]}
    assert grid.merged_meta(meta, {"command": "c"})["merges"] == [{"command": "b"}, {"command": "c"}]


def _stored_timed(path):
    rows = [{"model": "mlp", "method": m, "family": "x", "world": 2, "link": "1Gbps,0.05ms",
             "time_s": t, "step_s": 0.01, "bytes_per_step": 1.0, "final_acc": 0.5}
            for m, t in (("fp32", 0.123456789), ("async-ps", 99.0), ("signum", None))]
    path.write_text(json.dumps({"_meta": {"command": "python -m lab bench grid --part timed",
                                          "machine": "m"}, "targets": {"mlp": 0.9}, "steps": 4,
                                "eval_every": 2, "rows": rows}, indent=1))
    return rows


@pytest.mark.timeout(900)  # real runs: minutes on a loaded 2-core machine
def test_a_merge_measures_only_the_named_method_and_keeps_the_others_bitwise(tmp_path):
    path = tmp_path / "grid.json"
    rows = _stored_timed(path)
    before = {json.dumps(r, sort_keys=True) for r in rows if r["method"] != "async-ps"}
    assert grid.main(["--part", "timed", "--methods", "async-ps", "--merge",
                      "--out-timed", str(path)]) == 0
    data = json.loads(path.read_text())
    after = [r for r in data["rows"] if r["method"] != "async-ps"]
    assert {json.dumps(r, sort_keys=True) for r in after} == before and len(after) == 2
    mine, = [r for r in data["rows"] if r["method"] == "async-ps"]
    assert (mine["world"], mine["link"], mine["family"]) == (2, "1Gbps,0.05ms", "asynchronous")
    assert mine["bytes_per_step"] > 1e5 and mine["time_s"] != 99.0     # measured, not kept
    assert data["steps"] == 4 and data["_meta"]["command"] == "python -m lab bench grid --part timed"
    assert "--merge" in data["_meta"]["merges"][0]["command"] and not data.get("partial")


@pytest.mark.timeout(900)  # real runs: minutes on a loaded 2-core machine
def test_a_heldout_merge_predicts_every_method_again(tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_ADVISE_CACHE", str(tmp_path / "cache"))
    fp32 = {"method": "fp32", "model": "mlp", "world": 2, "compute_s": 0.001, "codec_s": 0.0,
            "traffic": {"allreduce": [1, 150_000]}, "params": 38922, "comm_s": 0.001}
    row = {"model": "mlp", "method": "fp32", "time_s": 0.5}
    stored = {("mlp", 2, "1Gbps,0.05ms"): {"rows": [row], "measured": {"fp32": 0.5},
                                           "profiles": {"fp32": fp32}}}
    out, = grid.heldout(list(stored), 4, 2, ["async-ps"], stored=stored)
    assert out["rows"][0] == row and [r["method"] for r in out["rows"]] == ["fp32", "async-ps"]
    assert set(out["predicted"]) == set(out["measured"]) == {"fp32", "async-ps"}
    assert out["measured"]["fp32"] == 0.5 and out["profiles"]["fp32"]["compute_s"] == 0.001
    assert out["profiles"]["async-ps"]["server_s"] > 0
    assert out["spearman"] == grid.score(out["predicted"], out["measured"])["spearman"]


@pytest.mark.parametrize("argv, msg", [(["--merge"], "--methods"),
                                       (["--merge", "--methods", "fp32", "--steps", "9"],
                                        "differs"),
                                       (["--methods", "zip"], "unknown"),
                                       (["--merge", "--methods", "fp32", "--repeats", "2"],
                                        "--repeats only")])
def test_merge_names_bad_arguments(argv, msg, capsys, tmp_path):
    _stored_timed(tmp_path / "grid.json")
    with pytest.raises(SystemExit):
        grid.main(["--part", "timed", "--out-timed", str(tmp_path / "grid.json"), *argv])
    assert msg in capsys.readouterr().err


def test_describe_names_the_command_machine_and_every_merge():
    meta = {"command": "python -m lab bench grid --part timed", "machine": "m1", "torch": "2.13",
            "date": "2026-11-25", "merges": [{"command": "python -m lab bench grid --merge",
                                              "machine": "m2", "date": "2026-11-26"}]}
    assert grid.describe(meta).splitlines() == [
        "produced by: python -m lab bench grid --part timed", "on m1, torch 2.13, 2026-11-25",
        "merged: python -m lab bench grid --merge (on m2, 2026-11-26)"]
    assert len(grid.describe({**meta, "merges": []}).splitlines()) == 2


def test_the_drawn_held_out_configurations_are_the_seeded_draw():
    """Part 10's six extra held-out configurations are what the seeded draw gives, frozen in the
    code before any was run: nobody picked them."""
    from lab.bench.grid import DRAW_SEED, DRAWN, HELDOUT, draw_heldout
    assert draw_heldout(DRAW_SEED, 6) == DRAWN
    assert not set(DRAWN) & set(HELDOUT) and len(set(DRAWN)) == 6
