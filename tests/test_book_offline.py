"""The book renders its math offline: MathJax is served from the build, nothing from a CDN.

A tiny book is built with the repository's own _config.yml; its page must load MathJax from
``_static/`` and fetch nothing from another host. Where Chromium is installed, the page is also
rendered with the network off (tools/check_offline_math.py) and must show typeset math, while
the same page pointed at a CDN must not (so the check can fail).
"""
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import check_offline_math as offline  # noqa: E402

PAGE = r"""# Offline math

Inline $T = \alpha + \beta n$ and a labelled display:

$$
T_{\text{ring}}(n) = 2(p-1)\alpha + 2\frac{p-1}{p}\,n\beta
$$ (eq-ring)

\begin{align}
a &= b + c \\
d &= \sum_{i=1}^{p} g_i
\end{align}

Equation {eq}`eq-ring` again.
"""


def _config() -> dict:
    return yaml.safe_load((ROOT / "_config.yml").read_text())


def test_config_points_mathjax_at_the_local_copy_installed_from_pypi():
    sphinx = _config()["sphinx"]
    path = sphinx["config"]["mathjax_path"]
    assert "sphinx-mathjax-offline" in sphinx["extra_extensions"] and "//" not in path
    spec = importlib.util.find_spec("sphinx-mathjax-offline")
    assert spec is not None, "pip install -r requirements.txt installs sphinx-mathjax-offline"
    assert (Path(spec.origin).parent / "static" / "mathjax" / path.split("/", 1)[1]).is_file()
    pins = (ROOT / "requirements.txt").read_text().split()
    assert any(p.startswith("sphinx-mathjax-offline==") for p in pins)


def test_remote_resource_scan_tells_fetches_from_links():
    page = ('<script src="https://cdn.example.org/m.js"></script><a href="https://doi.org/x">'
            '<link rel="stylesheet" href="//fonts.example.org/f.css"><link rel="canonical" '
            'href="https://book.example.org/p.html"><script src="../_static/mathjax/tex-chtml.js">')
    assert offline.remote_resources(page) == ["https://cdn.example.org/m.js",
                                              "//fonts.example.org/f.css"]


def test_math_status_sees_raw_delimiters_only_in_visible_text():
    dom = ("<p>see <span class='math'>\\(x\\)</span></p><pre>re.compile(r'\\(')</pre>"
           "<script>var a = '\\[';</script>")
    assert offline.math_status(dom) == (0, ["see \\(x\\)"])
    assert offline.math_status("<p><mjx-container>x</mjx-container></p>") == (1, [])


@pytest.fixture(scope="module")
def tiny_book(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("tiny_book")
    shutil.copy(ROOT / "_config.yml", src / "_config.yml")  # the book's own settings
    (src / "book").mkdir()
    (src / "book" / "references.bib").write_text("")
    (src / "_toc.yml").write_text("format: jb-book\nroot: page\n")
    (src / "page.md").write_text(PAGE)
    cli = "import sys; from jupyter_book.cli.main import main; sys.exit(main())"
    out = subprocess.run([sys.executable, "-c", cli, "build", str(src), "-W", "-n",
                          "--path-output", str(src / "out")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return src / "out" / "_build" / "html"


def test_built_page_loads_mathjax_from_the_build_and_nothing_from_other_hosts(tiny_book):
    html = (tiny_book / "page.html").read_text()
    assert 'src="_static/mathjax/tex-chtml.js"' in html
    assert (tiny_book / "_static" / "mathjax" / "tex-chtml.js").is_file()
    assert (tiny_book / "_static" / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2").is_dir()
    assert offline.remote_resources(html) == []


@pytest.mark.skipif(offline.find_browser() is None, reason="no Chromium (apt-get install chromium)")
def test_page_renders_its_math_with_the_network_off(tiny_book):
    page, browser = tiny_book / "page.html", offline.find_browser()
    containers, raw = offline.math_status(offline.render(page, browser))
    assert raw == [] and containers >= 3  # inline, the labelled display, the align block
    assert offline.control_fails(page, browser)  # the same page with a CDN MathJax: raw math
