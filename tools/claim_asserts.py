"""Find asserts that decide a claim's verdict: ``python tools/claim_asserts.py [NOTEBOOK ...]``.

A claim's *quantity* is what its ``lab.nb.claim(...)`` call is given as data (``rounds``,
``gaps``, ``estimate``, ``se``, ``value``, ``parts``) and the names its own cell assigns them
from. An ``assert`` anywhere in the notebook on one of those names, or a ``check=`` on the call,
would raise where a re-run came out otherwise, so the record could only ever say one thing
(issue 48). Asserts on mechanisms (equal bytes, equal loss to a from-scratch version, a bound
that holds by construction) check other names and stay. Exit status 1 where any is found.
"""
from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ("rounds", "gaps", "estimate", "se", "value", "parts")
BUILTIN = set(dir(__builtins__) if isinstance(__builtins__, dict) is False else __builtins__)


def _cells(path: Path):
    nb = json.loads(path.read_text(encoding="utf8"))
    for i, c in enumerate(nb["cells"]):
        if c["cell_type"] != "code":
            continue
        src = "\n".join("" if line.lstrip().startswith(("%", "!")) else line
                        for line in "".join(c["source"]).splitlines())
        yield i, ast.parse(src)


def _bound_inside(node) -> set[str]:
    """Names a comprehension or lambda inside ``node`` binds (local to it, not the cell's)."""
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.comprehension):
            out |= {t.id for t in ast.walk(n.target) if isinstance(t, ast.Name)}
        elif isinstance(n, ast.Lambda):
            out |= {a.arg for a in n.args.args}
    return out


def free_names(node) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} - _bound_inside(node)


def _is_claim(n) -> bool:
    f = getattr(n, "func", None)
    return isinstance(n, ast.Call) and getattr(f, "id", getattr(f, "attr", None)) == "claim"


def findings(path: Path) -> list[tuple[str, int, str]]:
    """(claim key, cell index, the assert or check= text) for each assert on a claim's quantity."""
    cells = list(_cells(path))
    defined = set(BUILTIN)
    for _, tree in cells:
        for n in ast.walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.ClassDef)):
                defined.add(n.name)
            elif isinstance(n, (ast.Import, ast.ImportFrom)):
                defined |= {(a.asname or a.name).split(".")[0] for a in n.names}
    out = []
    for i, tree in cells:
        for call in filter(_is_claim, ast.walk(tree)):
            key = call.args[0].value if call.args and isinstance(call.args[0], ast.Constant) else "?"
            q = set().union(*[free_names(kw.value) for kw in call.keywords if kw.arg in DATA])
            for n in ast.walk(tree):  # the cell's own assignments feeding the data, one level
                if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id in q
                                                     for t in n.targets):
                    q |= free_names(n.value)
            q -= defined
            out += [(key, i, "check=" + ast.unparse(kw.value)) for kw in call.keywords
                    if kw.arg == "check"]
            out += [(key, j, "assert " + ast.unparse(a.test)) for j, t in cells
                    for a in ast.walk(t) if isinstance(a, ast.Assert) and free_names(a.test) & q]
    return out


def main(argv=None) -> int:
    paths = [Path(p) for p in (argv or [])] or sorted((ROOT / "book").rglob("*.ipynb"))
    found = [(p, *f) for p in paths if "_build" not in p.parts for f in findings(p)]
    for p, key, cell, text in found:
        print(f"{p.relative_to(ROOT) if p.is_absolute() else p}: cell {cell}: claim {key}: {text[:140]}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
