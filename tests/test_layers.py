"""Imports go down the layers (DESIGN.md): what every run shares lives in ``lab.run``, below
``train``, ``sync``, ``averaging`` and ``pipeline``, so none of those reaches up into
``lab.train``, and ``lab.run`` reaches up into none of the runs. Checked on the source with
``ast`` (function-level imports included: they are arrows too)."""
import ast
from pathlib import Path

import pytest

LAB = Path(__file__).resolve().parents[1] / "lab"


def imported(path: Path) -> set[str]:
    """Every module ``path`` imports (relative imports resolved), at any level."""
    package = ".".join(path.relative_to(LAB.parent).with_suffix("").parts[:-1])
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            base = base[:len(base) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            out.add(mod)
            out |= {f"{mod}.{a.name}" for a in node.names}  # `from .. import train`
    return out


def _reaches(importer: str, target: str) -> list[str]:
    bad = []
    for path in sorted((LAB / importer).rglob("*.py")):
        hits = sorted(m for m in imported(path) if m == target or m.startswith(target + "."))
        bad += [f"{path.relative_to(LAB.parent)} imports {m}" for m in hits]
    return bad


@pytest.mark.parametrize("importer", ["sync", "averaging", "pipeline"])
def test_runs_do_not_reach_up_into_train(importer):
    assert _reaches(importer, "lab.train") == []


@pytest.mark.parametrize("target", ["lab.train", "lab.pipeline", "lab.sync.server", "lab.cli"])
def test_the_shared_room_reaches_up_into_no_run(target):
    assert _reaches("run", target) == []


def test_the_check_sees_a_function_level_import():
    mod = LAB / "sync" / "server.py"
    assert "lab.run.build" in imported(mod)  # a function-level relative import is found
