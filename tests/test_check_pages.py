"""tools/check_pages.py: the raw-MyST and pipe-table scans of built pages, the figure-text
criterion, the layout verdicts, and (where Chromium is installed) the in-browser measurements on
a small page made to fail each check."""
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

# What "On a GPU" built to when myst-nb rendered a cell's displayed Markdown as CommonMark, which
# has no tables: one paragraph of pipes, the separator's --- turned into dashes by smart quotes.
PIPE_PARAGRAPH = ('<div class="cell_output docutils container"><p>| codec | before (x copy) | met |\n'
                  '|\u2014|\u2014|\u2014|\n| none | 1.75 |  |\n| fp16 | 2.69 | False |</p></div>')


def test_pipe_tables_shown_as_text_are_found():
    assert check_pages.raw_tables(PIPE_PARAGRAPH) == ["| codec | before (x copy) | met |"]
    assert check_pages.raw_tables("<p>| a | b |\n|---|:--:|\n| 1 | 2 |</p>") == ["| a | b |"]
    # the same table rendered, a table in a code block (shown on purpose), and prose with bars
    assert check_pages.raw_tables("<table><tr><th>codec</th></tr></table>") == []
    assert check_pages.raw_tables("<pre>| a | b |\n|---|---|\n</pre>") == []
    assert check_pages.raw_tables("<p>|x| is the norm, and | y | too\n| a |</p>") == []


def test_smallest_text_of_a_figure():
    style = check_pages.STYLE
    assert style["font.size"] == 10 and style["figure.dpi"] == 110     # lab.viz.STYLE
    assert check_pages.smallest_text_pt(None) == 10
    assert check_pages.smallest_text_pt("ax.legend(fontsize=7); ax.set(title='t')") == 7
    assert check_pages.smallest_text_pt('ax.tick_params(labelsize="small")') == pytest.approx(8.33)
    assert check_pages.smallest_text_pt('plt.rcParams["legend.fontsize"] = 8') == 8
    assert check_pages.smallest_text_pt('ax.legend(prop={"size": 6})') == 6
    # sizes that are not text: a figure's, a marker's, a tensor's
    assert check_pages.smallest_text_pt("plt.subplots(figsize=(3, 2)); plot(ms=2, markersize=1); "
                                        "torch.randint(2, size=(1,))") == 10


def test_figure_text_from_the_stored_png(tmp_path):
    (tmp_path / "_images").mkdir()
    (tmp_path / "_images" / "f.png").write_bytes(_png_bytes(1859, 4, dpi=110))
    page = tmp_path / "book" / "p.html"
    assert check_pages.png_dpi(tmp_path / "_images" / "f.png") == pytest.approx(110, abs=0.01)
    assert check_pages.png_dpi(tmp_path / "missing.png") is None
    # Part 8.3 before issue 49: 7 pt legends, 17 in wide, shown at 1,056 px: 6 px
    fig = {"src": "../_images/f.png", "natural": 1859, "width": 1056, "scale": 1056 / 1859,
           "source": "axes[0].legend(fontsize=7)"}
    check_pages.figure_text(fig, page)
    assert fig["dpi"] == pytest.approx(110, abs=0.01) and fig["text_pt"] == 7
    assert fig["text_px"] == pytest.approx(7 * 110 / 72 * 1056 / 1859, abs=0.01)  # 6.1
    faults = check_pages.layout_faults(_measure(figures=[dict(fig, where="in #x", of_column=1.35,
                                                              right=1368, top=0, height=300)]))
    assert len(faults) == 1 and "is 6.1 px high, under 9 px" in faults[0]
    # the same figure with the style's 10 pt text, 10.5 in wide, shown at its size: 15 px
    fig = {"src": "data:image/png;base64,", "natural": 1155, "width": 1155, "scale": 1.0,
           "source": "ax.legend()"}
    check_pages.figure_text(fig, page)
    assert fig["text_px"] == pytest.approx(15.28, abs=0.01)


def test_wrapped_outputs_are_faults():
    faults = check_pages.layout_faults(_measure(outputs={
        "blocks": 2, "lines": 12, "scrolling": 1,
        "wrapped": [{"where": "in #t", "lines": 10, "shown": 17, "top": 0}]}))
    assert faults == ["output in #t: 10 lines shown on 17 (wrapped)"]


def test_static_only_scan_fails_on_a_broken_page(tmp_path, capsys):
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "good.html").write_text("<html><body><p>fine</p></body></html>")
    assert check_pages.main([str(tmp_path), "--static-only"]) == 0
    (tmp_path / "book" / "bad.html").write_text(f"<html><body>{BROKEN_RUBRIC}</body></html>")
    assert check_pages.main([str(tmp_path), "--static-only"]) == 1
    out = capsys.readouterr().out
    assert "FAIL book/bad.html" in out and "1 with raw directive or role text" in out
    (tmp_path / "book" / "bad.html").unlink()
    (tmp_path / "book" / "table.html").write_text(f"<html><body>{PIPE_PARAGRAPH}</body></html>")
    assert check_pages.main([str(tmp_path), "--static-only"]) == 1
    out = capsys.readouterr().out
    assert "FAIL book/table.html" in out and "table shown as pipe text" in out
    assert "1 tables shown as pipe text (on 1 pages)" in out


def _png_bytes(width: int, height: int, dpi: float | None = None) -> bytes:
    """A blank PNG of the given size; with ``dpi``, a pHYs chunk as matplotlib writes it."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(
            ">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    raw = b"".join(b"\x00" + b"\xff" * width for _ in range(height))
    ppm = round(dpi / 0.0254) if dpi else 0
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0,
                                                             0, 0))
            + (chunk(b"pHYs", struct.pack(">IIB", ppm, ppm, 1)) if dpi else b"")
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def _png(width: int, height: int) -> str:
    """A blank PNG of the given size, as a data URL."""
    return "data:image/png;base64," + base64.b64encode(_png_bytes(width, height)).decode()


@pytest.mark.skipif(check_pages.find_browser() is None, reason="needs Chromium")
def test_browser_measures_a_page_made_to_fail(tmp_path):
    """A 600 px column with a 1,500 px image squeezed into it, a formula wider than the column
    (plain HTML standing in for MathJax's output), a code line wider than its box, and two
    outputs with a line wider than theirs: one that wraps it (book.css before issue 49), one
    that scrolls."""
    page = tmp_path / "page.html"
    box = "width:300px;font:14px/1.4 monospace;padding:4px"
    page.write_text(f"""<html><body style="margin:0"><article class="bd-article"
        style="width:600px;padding:0 20px"><section id="s">
        <div class="math"><mjx-container display="true" style="display:block;overflow-x:auto">
        <mjx-math style="display:inline-block;width:900px;height:20px"></mjx-math>
        </mjx-container></div>
        <div class="cell"><div class="cell_input"><pre>ax.legend(fontsize=7)</pre></div>
        <div class="cell_output"><img src="{_png(1500, 10)}" style="max-width:100%"></div></div>
        <img src="{_png(300, 10)}">
        <pre style="overflow:auto;{box}">short\n{'x' * 80}</pre>
        <div class="cell_output"><pre style="white-space:pre-wrap;overflow-wrap:anywhere;{box}"
        >| a | b |\n{'y ' * 60}\nend</pre></div>
        <div class="cell_output"><pre style="white-space:pre;overflow-x:auto;{box}"
        >| a | b |\n{'y ' * 60}\nend</pre></div>
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
    assert big["source"] == "ax.legend(fontsize=7)" and small["source"] is None
    # the input's line fits; the outputs are not code lines
    assert m["code"] == {"lines": 3, "wide": 1, "boxes": [m["code"]["boxes"][0]]}
    outputs = m["outputs"]
    assert (outputs["blocks"], outputs["lines"], outputs["scrolling"]) == (2, 6, 2)
    (wrapped,) = outputs["wrapped"]
    assert wrapped["lines"] == 3 and wrapped["shown"] > 3
    for fig in m["figures"]:
        check_pages.figure_text(fig, page)
    assert big["text_px"] == pytest.approx(7 * 110 / 72 * 0.4, abs=0.05)
    faults = check_pages.layout_faults(m)
    assert len(faults) == 5, faults
