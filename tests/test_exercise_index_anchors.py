"""The exercise index links each notebook to its Exercises section, not to the top of the page.

The link is an HTML anchor (MyST resolves a heading of another document only with
``myst_heading_anchors``, which the book does not set), so nothing in the build checks it: these
tests do. The id is the one docutils gives the heading; a notebook whose earlier heading or label
takes that id is refused; and where a built book exists (``_build/html``), every link's page and
id are looked up in it.
"""
import re
import sys
from pathlib import Path

import pytest
from docutils.nodes import make_id

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import exercise_index as ex  # noqa: E402

HTML = ROOT / "_build" / "html"
LINK = re.compile(r'<a href="([^"#]+)\.html#([^"]+)">')


def test_every_notebook_row_links_to_its_exercises():
    page = ex.OUT.read_text(encoding="utf8")
    links = LINK.findall(page)
    notebooks = ex.scan()
    assert [doc for doc, _ in links] == [nb.docname for nb in notebooks]
    assert {anchor for _, anchor in links} == {"exercises"} == {make_id("Exercises")}
    assert "{doc}`" not in page.split("| Notebook |", 1)[1], "a row still links to a page's top"


def test_a_heading_that_takes_the_id_first_is_refused():
    assert ex.exercises_anchor(["# Title\n\n## Summary\n", "## Exercises\n\n1. Why?\n"]) == "exercises"
    # a code comment in a fenced block is no heading
    assert ex.exercises_anchor(["```bash\n# exercises\n```\n\n## Exercises\n"]) == "exercises"
    for cells in (["### Exercises\n\ntext\n", "## Exercises\n"],
                  ["(exercises)=\n## Warm-up\n\n## Exercises\n"]):
        with pytest.raises(ValueError, match="rename it"):
            ex.exercises_anchor(cells)


@pytest.mark.skipif(not (HTML / "book").is_dir(), reason="no built book in _build/html")
def test_each_link_reaches_its_section_in_the_built_book():
    page = ex.OUT.read_text(encoding="utf8")
    for doc, anchor in LINK.findall(page):
        target = HTML / "book" / f"{doc}.html"
        if not target.exists():
            continue   # built before this notebook existed
        assert re.search(rf'<section id="{re.escape(anchor)}"', target.read_text(encoding="utf8")), (
            f"{target.relative_to(ROOT)} has no section with id {anchor!r}")
