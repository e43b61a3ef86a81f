"""tools/student_copy.py writes the book's notebooks without solutions and with everything else.

The real book is copied once into a temporary folder: no copy may hold a solution, every copy
keeps its exercises word for word (as tools/exercise_index.py parses them), its code cells with
their outputs and every other Markdown cell; a notebook without solutions is copied byte for byte.
Small made-up cells check where a fence sat (alone, first, between exercises, last) and the other
fence forms. Nothing here executes a notebook.
"""
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import exercise_index as ex  # noqa: E402
import student_copy as sc  # noqa: E402

SOLUTION = "```{admonition} Solution\n:class: dropdown\nThe answer.\n```"


def _markdown(nb):
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"]


def _has_solution(text):
    return any(ex.is_solution(tok) for tok in ex._md.parse(text))


@pytest.fixture(scope="module")
def copies(tmp_path_factory):
    out = tmp_path_factory.mktemp("students")
    assert sc.main([str(out)]) == 0
    return out


def test_every_notebook_of_the_book_is_copied(copies):
    notebooks = sc.book_notebooks()
    assert len(notebooks) >= 34
    assert {p.relative_to(ROOT) for p in notebooks} == {
        p.relative_to(copies) for p in copies.rglob("*.ipynb")}


def test_a_copy_has_no_solution_and_keeps_the_exercises(copies):
    checked = 0
    for path in sc.book_notebooks():
        original = json.loads(path.read_text(encoding="utf8"))
        copy_path = copies / path.relative_to(ROOT)
        copy = json.loads(copy_path.read_text(encoding="utf8"))
        name = path.relative_to(ROOT)
        assert not any(_has_solution(t) for t in _markdown(copy)), f"{name} keeps a solution"
        assert not any("{admonition} Solution" in t for t in _markdown(copy)), name
        before, after = ex.parse_exercises(_markdown(original)), ex.parse_exercises(_markdown(copy))
        if before is None:
            assert after is None and copy_path.read_bytes() == path.read_bytes(), name
            continue
        checked += 1
        assert [(e.number, e.text) for e in after] == [(e.number, e.text) for e in before], name
        assert all(e.solution for e in before) and not any(e.solution for e in after), name
        # code cells and their outputs, and every Markdown cell without a solution, unchanged
        assert ([c for c in copy["cells"] if c["cell_type"] != "markdown"]
                == [c for c in original["cells"] if c["cell_type"] != "markdown"]), name
        kept = [c for c in original["cells"]
                if c["cell_type"] == "markdown" and not _has_solution("".join(c["source"]))]
        assert all(c in copy["cells"] for c in kept), name
        assert {k: v for k, v in copy.items() if k != "cells"} == {
            k: v for k, v in original.items() if k != "cells"}, name
    assert checked == len(ex.scan())


@pytest.mark.parametrize("cell, expected", [
    # a solution after each exercise, in the exercise's cell
    ("1. Why?\n\n" + SOLUTION + "\n\n2. How?\n\n" + SOLUTION, "1. Why?\n\n2. How?"),
    # a solution first, and one cell that is nothing but a solution
    (SOLUTION + "\n\n3. What?\n", "3. What?\n"),
    (SOLUTION, ""),
    # MyST's other forms: a colon fence, a four-backtick fence, a dropdown
    ("1. Why?\n\n:::{admonition} Solution\n:class: dropdown\nA.\n:::\n\nAfter.",
     "1. Why?\n\nAfter."),
    ("1. Why?\n\n````{admonition} Solution\n:class: dropdown\n```python\nx = 1\n```\n````",
     "1. Why?"),
    ("1. Why?\n\n```{dropdown} Solution\nA.\n```", "1. Why?"),
    # not solutions: a tip box, and a code block that shows the syntax
    ("```{admonition} Tip\n:class: tip\nHi.\n```", "```{admonition} Tip\n:class: tip\nHi.\n```"),
    ("````md\n```{admonition} Solution\n```\n````", "````md\n```{admonition} Solution\n```\n````"),
])
def test_where_the_fence_sat(cell, expected):
    text, removed = sc.strip_solutions(cell)
    assert text == expected
    assert bool(removed) == (cell != expected)


def test_a_cell_that_was_only_a_solution_is_dropped():
    nb = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": ["## Exercises\n", "\n",
                                                                       "1. Why?"]},
                    {"cell_type": "markdown", "metadata": {}, "source": [SOLUTION]},
                    {"cell_type": "code", "metadata": {}, "source": ["x = 1"], "outputs": [],
                     "execution_count": None}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    copy, removed = sc.student_notebook(nb)
    assert removed == 1 and [c["cell_type"] for c in copy["cells"]] == ["markdown", "code"]
    assert copy["cells"][0] is nb["cells"][0]


def test_it_refuses_to_write_over_the_book(tmp_path):
    for bad in (ROOT, ROOT / "book", ROOT / "book" / "students"):
        with pytest.raises(ValueError):
            sc.write_copies(bad)
    assert sc.main([str(ROOT)]) == 2
