"""Write the book's notebooks without the exercises' solutions: the copies to hand to students.

    python tools/student_copy.py OUTDIR        # OUTDIR/book/NN_part/NN_name.ipynb, ...

Every notebook in _toc.yml is written to OUTDIR at its path in the repository, so that OUTDIR's
``book/`` can replace the ``book/`` of a clone that students install as usual. A solution is
what tools/exercise_index.py calls one (``exercise_index.is_solution``): a fence
``{admonition} Solution`` (hidden in the book by ``:class: dropdown``) or ``{dropdown} Solution``
in a Markdown cell. Each is removed with the blank line that set it apart; a cell that held
nothing else is dropped. Everything else is left as it was, byte for byte: the exercises, every
other Markdown cell, the code cells and their outputs, and the notebooks without exercises.
The copies are written as the repository writes notebooks (JSON indented by one space, UTF-8).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from exercise_index import _md, is_solution  # noqa: E402  (one definition of a solution)

ROOT = Path(__file__).resolve().parents[1]
TOC = ROOT / "_toc.yml"


def book_notebooks(root: Path = ROOT) -> list[Path]:
    """The notebooks the book is built from, in the table of contents' order."""
    files: list[str] = []

    def walk(node):
        if isinstance(node, dict):
            if "file" in node:
                files.append(node["file"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(yaml.safe_load((root / "_toc.yml").read_text(encoding="utf8")))
    return [root / f"{f}.ipynb" for f in files if (root / f"{f}.ipynb").exists()]


def strip_solutions(markdown: str) -> tuple[str, int]:
    """``markdown`` without its solution fences, and how many there were."""
    lines = markdown.splitlines(keepends=True)
    spans = [tok.map for tok in _md.parse(markdown) if is_solution(tok) and tok.map]
    ends_cell = any(end >= len(lines) for _, end in spans)

    def blank(i: int) -> bool:
        return 0 <= i < len(lines) and not lines[i].strip()

    for start, end in sorted(spans, reverse=True):
        del lines[start:end]
        # the fence was a block of its own: drop the blank line that now doubles one before it
        if blank(start) and (start == 0 or blank(start - 1)):
            del lines[start]
    text = "".join(lines)
    if ends_cell:   # no blank lines left behind where a fence ended the cell
        text = text.rstrip("\n")
    return text, len(spans)


def student_notebook(nb: dict) -> tuple[dict, int]:
    """A copy of a notebook (as JSON) without solutions, and how many were removed."""
    cells, removed = [], 0
    for cell in nb["cells"]:
        if cell["cell_type"] != "markdown":
            cells.append(cell)
            continue
        source = "".join(cell["source"])
        text, n = strip_solutions(source)
        if not n:
            cells.append(cell)
            continue
        removed += n
        if text.strip():
            cells.append({**cell, "source": text.splitlines(keepends=True)})
    return {**nb, "cells": cells}, removed


def write_copies(out: Path, root: Path = ROOT) -> list[tuple[Path, int]]:
    """Write every notebook of the book under ``out``; return (written path, solutions removed)."""
    out = out.resolve()
    if out == root.resolve() or (root / "book").resolve() in (out, *out.parents):
        raise ValueError(f"{out} would overwrite or sit among the book's own notebooks: "
                         "choose a folder outside book/ and not the repository root")
    written = []
    for path in book_notebooks(root):
        nb = json.loads(path.read_text(encoding="utf8"))
        copy, removed = student_notebook(nb)
        dest = out / path.relative_to(root)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(json.dumps(copy, indent=1, ensure_ascii=False) + "\n", encoding="utf8")
        written.append((dest, removed))
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir", type=Path, help="folder to write the copies into")
    args = ap.parse_args(argv)
    try:
        written = write_copies(args.outdir)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    total = sum(n for _, n in written)
    with_solutions = sum(1 for _, n in written if n)
    print(f"wrote {len(written)} notebooks to {args.outdir.resolve() / 'book'}: {total} solutions "
          f"removed from {with_solutions} of them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
