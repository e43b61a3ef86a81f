"""Every benchmark row says how its numbers were made (issue 48, item 4): the link, the clock of
each time column, the kind of each byte column (:mod:`lab.bench.made`); a claim reads them."""
import ast
import pathlib

import pytest

from lab.bench import made as M

BENCH = pathlib.Path(__file__).resolve().parents[1] / "lab" / "bench"


def _valid(row):
    m = row["made"]
    assert m["link"] in M.LINKS
    assert set(m["clock"].values()) <= set(M.CLOCKS) and set(m["clock"]) <= set(row)
    assert set(m["bytes"].values()) <= set(M.BYTES) and set(m["bytes"]) <= set(row)


def test_made_checks_its_kinds_and_names_the_argument():
    assert M.made("kernel", {"ms": "wall"}, {"B": "nic"})["link"] == "kernel"
    with pytest.raises(ValueError, match="link"):
        M.made("emulated")
    with pytest.raises(ValueError, match=r"clock\['ms'\]"):
        M.made("none", {"ms": "measured"})
    with pytest.raises(ValueError, match=r"bytes\['B'\]"):
        M.made("none", bytes={"B": "wire"})
    assert [M.link_of(n) for n in (None, "none", "1Gbps,1ms")] == ["none", "none", "modeled"]
    assert M.link_of("1Gbps", kernel=True) == "kernel"


def test_stamp_keeps_only_the_columns_a_row_has_and_reads_a_link_per_row():
    rows = M.stamp([{"network": "none", "ms": 1.0}, {"network": "1Gbps,1ms", "ms": 2.0, "sent": 8}],
                   lambda r: M.link_of(r["network"]), clock={"ms": "wall", "other": "cpu"},
                   bytes={"sent": "handed over"})
    assert [r["made"]["link"] for r in rows] == ["none", "modeled"]
    assert rows[0]["made"] == {"link": "none", "clock": {"ms": "wall"}, "bytes": {}}
    assert rows[1]["made"]["bytes"] == {"sent": "handed over"}


def test_every_function_that_builds_rows_stamps_them():
    """A static guard: a function of a benchmark module that appends rows calls ``stamp``."""
    bare = []
    for path in sorted(BENCH.glob("*.py")):
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, ast.FunctionDef):
                continue
            calls = {c.func.attr if isinstance(c.func, ast.Attribute) else getattr(c.func, "id", "")
                     for c in ast.walk(fn) if isinstance(c, ast.Call)}
            appends_rows = any(isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
                               and c.func.attr == "append" and isinstance(c.func.value, ast.Name)
                               and c.func.value.id in ("rows", "fits") for c in ast.walk(fn))
            if appends_rows and "stamp" not in calls:
                bare.append(f"{path.name}:{fn.name}")
    # rows built from launched workers are stamped by their caller's function, listed here
    stamped_by_caller = {"collectives.py:_overhead", "links.py:_sweep", "lowrank.py:_methods"}
    assert sorted(set(bare) - stamped_by_caller) == []


def test_measured_rows_carry_made_and_a_claim_reads_its_evidence_from_them(capsys):
    from lab.bench import codecs, robust, table
    from lab.claims import evidence
    rows = codecs.run(["sign", "topk"], sizes=(4096,), repeats=1)
    rows += robust.time_rules(ns=(8,), d=1000, repeats=1)
    for r in rows:
        _valid(r)
    ev = evidence(rows[:2], column="ms")
    assert ev == {"link": "none", "clock": "wall", "bytes": None, "rows": 2}
    assert evidence(rows[:1], column=["ms", "ratio"])["bytes"] == "handed over"
    with pytest.raises(ValueError, match="column 'nope'"):
        evidence(rows[:1], column="nope")
    with pytest.raises(ValueError, match="'made' entry"):
        evidence([{"ms": 1.0}], column="ms")
    table.print_rows(rows[:2], "t")
    out = capsys.readouterr().out
    assert "(made: link none; wall: ms" in out and "'clock'" not in out


def test_rows_from_launched_ranks_carry_made():
    from lab.bench import artopk, collectives
    for r in artopk.run(size=2000, workers=(2,), networks=("none", "1Gbps,1ms"), repeats=1):
        _valid(r)
        assert r["made"]["link"] == ("none" if r["network"] == "none" else "modeled")
        assert r["made"]["clock"]["modeled ms"] == "modeled"
    ab, rows = collectives.fit(worlds=(2,), sizes=(1024, 4096), repeats=1)
    for r in rows + collectives.overhead(sizes=(4096,), iters=2):
        _valid(r)


def test_bench_help_gives_each_benchmarks_first_sentence_whole():
    from lab.cli.bench import listing
    line = next(ln for ln in listing().splitlines() if ln.strip().startswith("ps "))
    assert line.rstrip().endswith("(own flags)") and "; and (" not in line and "``" not in line


def test_a_benchmarks_help_shows_defaults(capsys):
    from lab.bench import ps
    with pytest.raises(SystemExit):
        ps.main(["--help"])
    out = capsys.readouterr().out
    assert "training steps per run (default: 40)" in out and "``" not in out and ":func:" not in out
