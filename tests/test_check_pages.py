"""tools/check_pages.py: the raw-MyST scan of built pages, the layout verdicts, and (where
Chromium is installed) the in-browser measurements on a small page made to fail each check."""
import base64
import json
import struct
import sys
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import check_pages  # noqa: E402

# What Part 7's overview built to when a {rubric} title held backticks: the fence was no fence,
# its text a paragraph, and the next bare ``` opened a code block that swallowed the section.
BROKEN_RUBRIC = ('<p class="rubric">Papers</p><p>```{rubric} In <code class="docutils literal">'
                 '<span class="pre">lab</span></code></p><div class="highlight-default"><pre>'
                 '`python -m lab train` picks...\n```{rubric} P3 on parameter servers\n</pre></div>')


def test_raw_directive_and_role_text_is_found():
    found = check_pages.raw_myst(BROKEN_RUBRIC)
    assert len(found) == 2 and all("```{rubric}" in f for f in found)
    # a role in a code block keeps its backticks; in prose they became an inline literal
    assert check_pages.raw_myst("<pre>see {doc}`overview` for more</pre>")
    assert check_pages.raw_myst('<p>P3 {cite:p}<code class="literal">jayarajan2019p3</code> sends'
                                "</p>")
    assert check_pages.raw_myst("<p>see {eq}`eq-ring` above</p>")


def test_what_is_not_raw_myst():
    page = ("<html><head><title>{doc}`x`</title><script>var s = '{eq}`a`';</script></head><body>"
            # MyST shown on purpose, in a Markdown code block
            '<div class="highlight-md notranslate"><div class="highlight"><pre>'
            "```{admonition} Solution\n:class: dropdown\n```\n{doc}`exercise_index`</pre></div></div>"
            # TeX that MathJax typesets
            '<p><span class="math notranslate">\\(\\{|r_j| : j \\in \\text{sample}\\}\\)</span></p>'
            '<div class="math">\\[\\text{send}\\{i\\}\\]</div>'
            # a Python f-string in a code cell, and braces in prose
            '<pre>print(f"{n}x {d:&lt;6}")</pre><p>the set {0, 1} and {s} alone</p></body></html>')
    assert check_pages.raw_myst(page) == []


def _measure(**kw):
    m = {"viewport": 1400, "column": {"left": 312, "right": 1096, "width": 784},
         "equations": [], "figures": [], "code": {"lines": 10, "wide": 0, "boxes": []}}
    m.update(kw)
    return m


def test_layout_verdicts():
    assert check_pages.layout_faults(_measure(
        equations=[{"where": "equation-eq-a", "width": 700, "over": 0, "clash": 0, "top": 0,
                    "height": 40}],
        figures=[{"where": "in #x", "natural": 1859, "width": 1056, "scale": 0.568,
                  "of_column": 1.35, "right": 1368, "top": 0, "height": 300}])) == []
    faults = check_pages.layout_faults(_measure(
        equations=[{"where": "equation-eq-b", "width": 839, "over": 126, "clash": 30, "top": 0,
                    "height": 40}],
        figures=[{"where": "in #y", "natural": 1859, "width": 784, "scale": 0.42,
                  "of_column": 1.0, "right": 1096, "top": 0, "height": 200},
                 {"where": "in #z", "natural": 2000, "width": 1200, "scale": 0.6,
                  "of_column": 1.5, "right": 1512, "top": 0, "height": 200}],
        code={"lines": 10, "wide": 3, "boxes": [{"where": "in #c", "wide": 3, "top": 0}]}))
    text = "\n".join(faults)
    assert len(faults) == 5, text
    assert "overflows the column by 126 px" in text and "number sits on the formula" in text
    assert "0.42 of its size" in text and "runs off the page" in text
    assert "3 code lines wider than their box" in text


def test_static_only_scan_fails_on_a_broken_page(tmp_path, capsys):
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "good.html").write_text("<html><body><p>fine</p></body></html>")
    assert check_pages.main([str(tmp_path), "--static-only"]) == 0
    (tmp_path / "book" / "bad.html").write_text(f"<html><body>{BROKEN_RUBRIC}</body></html>")
    assert check_pages.main([str(tmp_path), "--static-only"]) == 1
    out = capsys.readouterr().out
    assert "FAIL book/bad.html" in out and "1 with raw directive or role text" in out


def _png(width: int, height: int) -> str:
    """A blank PNG of the given size, as a data URL."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(
            ">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    raw = b"".join(b"\x00" + b"\xff" * width for _ in range(height))
    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0,
                                                            0, 0))
           + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
    return "data:image/png;base64," + base64.b64encode(png).decode()


@pytest.mark.skipif(check_pages.find_browser() is None, reason="needs Chromium")
def test_browser_measures_a_page_made_to_fail(tmp_path):
    """A 600 px column with a 1,500 px image squeezed into it, a formula wider than the column
    (plain HTML standing in for MathJax's output) and a code line wider than its box."""
    page = tmp_path / "page.html"
    page.write_text(f"""<html><body style="margin:0"><article class="bd-article"
        style="width:600px;padding:0 20px"><section id="s">
        <div class="math"><mjx-container display="true" style="display:block;overflow-x:auto">
        <mjx-math style="display:inline-block;width:900px;height:20px"></mjx-math>
        </mjx-container></div>
        <div class="cell_output"><img src="{_png(1500, 10)}" style="max-width:100%"></div>
        <img src="{_png(300, 10)}">
        <pre style="overflow:auto;width:300px;font:14px monospace">short\n{'x' * 80}</pre>
        </section></article></body></html>""")
    browser = check_pages.Browser(check_pages.find_browser(), width=1000)
    try:
        browser.open(page.resolve().as_uri())
        m = json.loads(browser.evaluate(check_pages.MEASURE_JS))
    finally:
        browser.close()
    assert m["column"]["width"] == pytest.approx(600, abs=1)
    assert m["equations"][0]["over"] > 250
    big, small = m["figures"]
    assert big["scale"] == pytest.approx(0.4, abs=0.01) and small["scale"] == pytest.approx(1)
    assert m["code"] == {"lines": 2, "wide": 1, "boxes": [m["code"]["boxes"][0]]}
    faults = check_pages.layout_faults(m)
    assert len(faults) == 3, faults
