"""Check the built book as a reader sees it, and the notebooks as JupyterLab shows them.

    python tools/check_pages.py [_build/html] [--static-only] [--width 1400] [--jobs 2]
                                [--only GLOB] [--screenshots DIR] [--json FILE]
                                [--jupyterlab NOTEBOOK ... [--lab-only]]

``jupyter-book build -W -n`` passes pages that a reader cannot use; this script finds them.

* **Raw MyST** (static, no browser): a directive or role that was not parsed shows as text,
  e.g. ```` ```{rubric} ```` or ``{doc}`page` `` (a backtick fence whose title holds a backtick
  is no fence in CommonMark, so everything after it became one code block). Every page's visible
  text is searched, code blocks included; only code blocks in Markdown or MyST
  (``highlight-md``/``-myst``/``-markdown``), where the book shows the syntax on purpose, are
  exempt.
* **Overflow** (browser): a display equation wider than the text column, which scrolls sideways
  or is cut off, or whose number sits on the formula.
* **Pipe tables** (static): a Markdown table shown as its text, rows of ``| a | b |`` over a row
  of dashes (a cell's displayed Markdown rendered as CommonMark, which has no tables; the book
  renders it as GitHub-flavoured Markdown, ``nb_render_markdown_format`` in _config.yml).
* **Tiny figures** (browser): a figure shown at less than ``--min-scale`` (0.55) of its own
  size. A figure that runs off the page is a fault too.
* **Small figure text** (browser): a figure whose smallest text is shown under ``--min-text``
  (9) CSS px. Text of s pt in a PNG saved at d dpi is s * d / 72 px high at full size, and
  shown at (shown width / PNG width) of that. d is read from the PNG (matplotlib writes it in the
  pHYs chunk), s is the smallest of the book's plot style (``lab.viz.STYLE``: 10 pt) and every
  size the cell that drew the figure names in its code (``fontsize=7``, ``labelsize="small"``,
  ``{"size": 8}``), read from the page's copy of the cell's input. (At 110 dpi and 10 pt a figure
  passes shown at 0.59 of its size or more; with a 7 pt legend only at 0.84.)
* **Wide code** (browser): a line of input code wider than its box, hidden behind a scroll bar
  (code wraps, book.css).
* **Wrapped outputs** (browser): a cell's output shown on more lines than it has. Outputs do
  not wrap (a table printed row by row is unreadable wrapped): a line wider than its box
  scrolls sideways within it, and the summary counts the output blocks that do.

The browser checks open every page in headless Chromium at ``--width`` CSS px (default 1400),
driven through the DevTools protocol with ``websocket-client`` (a dependency of the Jupyter server,
pinned in requirements.txt), wait for MathJax, and measure the laid-out page; ``--jobs`` browsers
share the pages. The theme's icon font and the search index are not loaded: they change no layout.

``--jupyterlab NOTEBOOK`` starts JupyterLab (``jupyter lab``, on 127.0.0.1 with a random token and
settings of its own), opens each notebook in headless Chromium and checks that its Markdown cells
are rendered as MyST (the ``jupyterlab-myst`` extension pinned in requirements.txt): every cell
rendered, and none of the directives and roles of its source left as text. (With the extension
disabled the same check fails: no cell rendered, and the roles shown as text.)

Exit status 0 = no fault. Chromium comes from the system package manager (Debian:
``apt-get install -y chromium``); without it, ``--static-only`` runs the raw-MyST check alone.
"""
from __future__ import annotations

import argparse
import base64
import fnmatch
import html.parser
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# A directive fence or a role left as text. In a code block the role keeps its backticks
# ({doc}`page`); in prose the backticks became an inline literal, so the role's name sits right
# before the literal's text ({doc}page).
DIRECTIVE = r"(?:```|~~~|:::)\{[A-Za-z][\w:.+-]*\}"
RAW_IN_CODE = re.compile(DIRECTIVE + r"|\{[A-Za-z][\w:.+-]*\}`")
RAW_IN_PROSE = re.compile(DIRECTIVE + r"|\{[A-Za-z][\w:.+-]*\}(?=[`\w])")
# Code blocks in these languages show MyST syntax on purpose.
MARKUP_BLOCKS = re.compile(r"\bhighlight-(?:md|myst|markdown)\b")
MIN_SCALE = 0.55
# A figure's smallest text, shown, in CSS px (issue 49: legends of 7 pt drawn 1,860 px wide and
# shown at 1,056 px were 6 px high).
MIN_TEXT_PX = 9.0
# A table in Markdown that was not parsed as one (CommonMark has no tables): its rows as text.
# Sphinx's smart quotes turn the separator's --- into dashes.
PIPE_ROW = re.compile(r"^[ \t]*\|.*\|[ \t]*$")
PIPE_RULE = re.compile(r"^[ \t]*\|?(?:[ \t]*:?[-\u2013\u2014]+:?[ \t]*\|)+[ \t]*(?::?[-\u2013\u2014]+:?)?[ \t]*$")
# Scripts that change no layout and cost most of a page's load: the icon font and search index.
BLOCKED = ["*/fontawesome.js*", "*/searchindex.js*"]


class _Text(html.parser.HTMLParser):
    """A built page's visible text, as prose and as code, without scripts, styles, TeX source
    (MathJax typesets it) and Markdown code examples."""

    HIDDEN = {"head", "script", "style", "noscript", "template", "textarea"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.hidden: str | None = None  # the tag of the hidden element we are in, if any
        self.nest = 0                   # how deep that tag is nested in itself
        self.pre = 0                    # how many <pre> we are in
        self.prose: list[str] = []
        self.code: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.pre += tag == "pre"
        if self.hidden is None:
            cls = dict(attrs).get("class") or ""
            if (tag in self.HIDDEN or MARKUP_BLOCKS.search(cls)
                    or re.search(r"\bmath\b", cls)):
                self.hidden, self.nest = tag, 1
        elif tag == self.hidden:
            self.nest += 1

    def handle_endtag(self, tag):
        self.pre -= tag == "pre" and self.pre > 0
        if tag == self.hidden:
            self.nest -= 1
            if self.nest == 0:
                self.hidden = None

    def handle_data(self, data):
        if self.hidden is None:
            (self.code if self.pre else self.prose).append(data)


def raw_myst(page_html: str) -> list[str]:
    """Snippets of a page's visible text that hold a directive or role MyST did not parse."""
    parser = _Text()
    parser.feed(page_html)
    parser.close()
    return (raw_in_text("".join(parser.prose)) + raw_in_text("\n".join(parser.code), RAW_IN_CODE))


def raw_tables(page_html: str) -> list[str]:
    """The first row of each Markdown pipe table shown as text in a page's prose (a cell's
    displayed Markdown rendered without table support, or a table that did not parse): a row,
    then a separator row of dashes, as the page's visible text outside code blocks."""
    parser = _Text()
    parser.feed(page_html)
    parser.close()
    lines = "".join(parser.prose).splitlines()
    return [" ".join(lines[i].split())[:80] for i in range(len(lines) - 1)
            if PIPE_ROW.match(lines[i]) and PIPE_RULE.match(lines[i + 1])]


def raw_in_text(text: str, pattern: re.Pattern = RAW_IN_PROSE) -> list[str]:
    return [" ".join(text[max(0, m.start() - 30):m.end() + 40].split())
            for m in pattern.finditer(text)]


def find_browser() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


# Measured once the page is laid out and MathJax has typeset. The text column is the content
# box of sphinx-book-theme's <article class="bd-article">.
MEASURE_JS = r"""
(async () => {
  const sleep = ms => new Promise(r => setTimeout(r, ms));
  for (let i = 0; i < 100 && document.querySelector('.math') &&
                  !(window.MathJax && MathJax.startup && MathJax.startup.promise); i++) await sleep(50);
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
  await document.fonts.ready;
  await Promise.all([...document.images].map(im => im.complete ? null :
      new Promise(r => { im.onload = im.onerror = r; })));
  const article = document.querySelector('article.bd-article') || document.querySelector('main') || document.body;
  const a = article.getBoundingClientRect(), acs = getComputedStyle(article);
  const col = {left: a.left + parseFloat(acs.paddingLeft), right: a.right - parseFloat(acs.paddingRight)};
  col.width = col.right - col.left;
  const label = el => {
    const sec = el.closest('section[id]'), eq = el.closest('[id^="equation-"]');
    return [eq && eq.id, sec && 'in #' + sec.id].filter(Boolean).join(' ');
  };
  const out = {column: col, viewport: window.innerWidth,
               equations: [], figures: [], code: {lines: 0, wide: 0, boxes: []},
               outputs: {blocks: 0, lines: 0, scrolling: 0, wrapped: []}};
  for (const c of document.querySelectorAll('mjx-container[display="true"]')) {
    const m = c.querySelector('mjx-math') || c;
    const r = m.getBoundingClientRect(), box = c.getBoundingClientRect();
    // wider than the column, or than its own box (which then scrolls or cuts it off)
    const over = Math.max(0, r.right - Math.min(col.right, box.right), Math.max(col.left, box.left) - r.left,
                          c.scrollWidth - c.clientWidth);
    // the number (Sphinx's span.eqno beside the container) must not sit on the formula
    const block = c.closest('div.math'), no = block && block.querySelector('.eqno');
    let clash = 0;
    if (no) {
      const n = no.getBoundingClientRect();
      if (n.top < r.bottom && r.top < n.bottom) clash = Math.max(0, Math.min(r.right, n.right) - Math.max(r.left, n.left));
    }
    out.equations.push({where: label(c), width: r.width, over: over, clash: clash,
                        top: r.top + window.scrollY, height: r.height});
  }
  for (const im of article.querySelectorAll('img')) {
    if (!im.naturalWidth || !im.offsetParent) continue;
    const r = im.getBoundingClientRect();
    // the code that drew it (a notebook cell's input, folded or not): its font sizes
    const cell = im.closest('div.cell'), input = cell && cell.querySelector('div.cell_input pre');
    out.figures.push({src: im.getAttribute('src'), where: label(im), natural: im.naturalWidth,
                      width: r.width, scale: r.width / im.naturalWidth, of_column: r.width / col.width,
                      right: r.right, top: r.top + window.scrollY, height: r.height,
                      source: input ? input.textContent : null});
  }
  for (const pre of article.querySelectorAll('pre')) {
    if (!pre.offsetParent) continue;  // hidden (a closed dropdown)
    const text = pre.textContent.replace(/\n$/, '');
    const lines = text.split('\n').length;
    if (pre.closest('div.cell_output, div.output')) {
      // An output must show each of its lines on one line (it scrolls sideways instead): the
      // same text laid out unwrapped, in a copy of the box, gives the height of one line.
      const copy = pre.cloneNode(true);
      Object.assign(copy.style, {whiteSpace: 'pre', position: 'absolute', visibility: 'hidden',
                                 width: pre.clientWidth + 'px', left: '0', top: '0'});
      pre.parentElement.appendChild(copy);
      const cs = getComputedStyle(pre);
      const pad = parseFloat(cs.paddingTop) + parseFloat(cs.paddingBottom);
      const line = (copy.scrollHeight - pad) / lines, shown = Math.round((pre.scrollHeight - pad) / line);
      const scrolls = copy.scrollWidth > pre.clientWidth + 1;
      copy.remove();
      out.outputs.blocks += 1; out.outputs.lines += lines;
      out.outputs.scrolling += scrolls;
      if (shown > lines) out.outputs.wrapped.push({where: label(pre), lines: lines, shown: shown,
                                                   top: pre.getBoundingClientRect().top + window.scrollY});
      continue;
    }
    out.code.lines += lines;
    if (pre.scrollWidth > pre.clientWidth + 1) {
      // count the lines wider than the box, each measured unwrapped in the box's own font
      const cs = getComputedStyle(pre);
      const room = pre.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
      const probe = document.createElement('span');
      probe.style.whiteSpace = 'pre'; probe.style.position = 'absolute'; probe.style.visibility = 'hidden';
      pre.appendChild(probe);
      let wide = 0;
      for (const line of text.split('\n')) {
        probe.textContent = line;
        if (probe.getBoundingClientRect().width > room + 1) wide++;
      }
      probe.remove();
      out.code.wide += wide;
      out.code.boxes.push({where: label(pre), wide: wide, top: pre.getBoundingClientRect().top + window.scrollY});
    }
  }
  return JSON.stringify(out);
})()
"""


class Browser:
    """One headless Chromium, driven over the DevTools protocol through a websocket."""

    FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--hide-scrollbars", "--mute-audio", "--remote-debugging-port=0",
             # the book's pages are files and JupyterLab runs on this machine: no other host
             # resolves, and no proxy is used
             "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--no-proxy-server"]

    def __init__(self, binary: str, width: int = 1400, height: int = 900, timeout: float = 60,
                 blocked: list[str] | None = None):
        import websocket  # websocket-client, pinned in requirements.txt

        self.width, self.height, self.timeout = width, height, timeout
        self.profile = tempfile.mkdtemp(prefix="check-pages-")
        self.ws = None
        self.proc = subprocess.Popen(
            [binary, *self.FLAGS, f"--user-data-dir={self.profile}",
             f"--window-size={width},{height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        port_file = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while not (port_file.is_file() and len(port_file.read_text().split()) >= 2):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                err = "" if self.proc.poll() is None else self.proc.stderr.read().decode(errors="replace")
                self.close()
                raise RuntimeError(f"{binary} did not start its DevTools endpoint:\n{err[-2000:]}")
            time.sleep(0.05)
        port, path = port_file.read_text().split()[:2]
        self.ws = websocket.create_connection(f"ws://127.0.0.1:{port}{path}", timeout=timeout,
                                              suppress_origin=True)
        self.next_id, self._loaded = 0, False
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Page.enable", session=True)
        self.call("Emulation.setDeviceMetricsOverride", session=True, width=width, height=height,
                  deviceScaleFactor=1, mobile=False)
        if blocked:
            self.call("Network.enable", session=True)
            self.call("Network.setBlockedURLs", session=True, urls=blocked)

    def _recv(self) -> dict:
        msg = json.loads(self.ws.recv())
        if msg.get("method") == "Page.loadEventFired":
            self._loaded = True
        return msg

    def call(self, method: str, session: bool = False, **params):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        self.ws.send(json.dumps(msg))
        while True:
            reply = self._recv()
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def open(self, url: str) -> None:
        self._loaded = False
        self.call("Page.navigate", session=True, url=url)
        deadline = time.monotonic() + self.timeout
        while not self._loaded:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not load in {self.timeout:.0f} s")
            self._recv()

    def evaluate(self, expression: str):
        res = self.call("Runtime.evaluate", session=True, expression=expression,
                        awaitPromise=True, returnByValue=True, timeout=int(self.timeout * 1000))
        if "exceptionDetails" in res:
            raise RuntimeError(f"script failed: {res['exceptionDetails']}")
        return res["result"].get("value")

    def screenshot(self, path: Path, top: float | None = None) -> None:
        """A PNG of the viewport, scrolled first so that ``top`` (CSS px) is near its top."""
        if top is not None:
            self.evaluate(f"window.scrollTo(0, {max(0.0, top - 150):.0f})")
            time.sleep(0.3)  # let sticky headers and the contents settle
        data = self.call("Page.captureScreenshot", session=True, format="png")["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        try:
            if self.ws is not None:
                self.ws.close()
        finally:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            shutil.rmtree(self.profile, ignore_errors=True)


def png_dpi(path: Path) -> float | None:
    """The resolution a PNG was saved at (its pHYs chunk, which matplotlib writes), or None."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    at = 8
    while at + 8 <= len(data) and data[:8] == b"\x89PNG\r\n\x1a\n":
        size, kind = int.from_bytes(data[at:at + 4], "big"), data[at + 4:at + 8]
        if kind == b"pHYs" and data[at + 16] == 1:           # unit: the metre
            return int.from_bytes(data[at + 8:at + 12], "big") * 0.0254
        if kind in (b"IDAT", b"IEND"):
            return None
        at += 12 + size
    return None


def _style() -> dict:
    """The book's plot style (``lab.viz.STYLE``, read from its source: importing lab would import
    torch) over matplotlib's defaults."""
    import ast

    import matplotlib

    rc = {k: matplotlib.rcParamsDefault[k] for k in
          ("font.size", "figure.dpi", "legend.fontsize", "xtick.labelsize", "ytick.labelsize",
           "axes.labelsize", "axes.titlesize")}
    try:
        tree = ast.parse((ROOT / "lab" / "viz.py").read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "STYLE"
                                                    for t in node.targets):
                rc.update({k: v for k, v in ast.literal_eval(node.value).items() if k in rc})
    except (OSError, SyntaxError, ValueError):
        pass
    return rc


STYLE = _style()
# A size in a plotting cell's source: fontsize=7, labelsize="small", {"size": 8}, "legend.fontsize": 8
FONT_SIZE = re.compile(r"""(?:\b(?:fontsize|labelsize|title_fontsize)\s*=\s*"""
                       r"""|["'](?:size|[\w.]*fontsize|[\w.]*labelsize|font\.size)["']\s*[:\]]\s*=?\s*)"""
                       r"""(["']?)([\w.\-]+)\1""")


def points(value, base: float | None = None) -> float | None:
    """A matplotlib font size in points: a number, or a name (``small``) relative to ``base``."""
    from matplotlib.font_manager import font_scalings

    base = float(STYLE["font.size"] if base is None else base)
    if isinstance(value, str) and value in font_scalings:
        return base * font_scalings[value]
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def smallest_text_pt(source: str | None) -> float:
    """The smallest font size, in points, of a figure drawn by ``source``: the book's style's
    sizes (``lab.viz.STYLE``: 10 pt), and every size the code names (``fontsize=7``)."""
    sizes = [points(STYLE[k]) for k in ("font.size", "legend.fontsize", "xtick.labelsize",
                                        "ytick.labelsize", "axes.labelsize")]
    for m in FONT_SIZE.finditer(source or ""):
        sizes.append(points(m.group(2)))
    return min(x for x in sizes if x is not None and x > 0)


def figure_text(fig: dict, page: Path) -> None:
    """Add to a figure's measurements its smallest text as drawn (pt, at the PNG's dpi) and as
    shown (CSS px): pt * dpi / 72 * shown width / natural width."""
    src = fig.get("src") or ""
    dpi = None if src.startswith("data:") else png_dpi((page.parent / src.split("?")[0]))
    fig["dpi"] = dpi or float(STYLE["figure.dpi"])
    fig["text_pt"] = smallest_text_pt(fig.get("source"))
    fig["text_px"] = fig["text_pt"] * fig["dpi"] / 72 * fig["scale"]


def layout_faults(m: dict, min_scale: float = MIN_SCALE,
                  min_text: float = MIN_TEXT_PX) -> list[str]:
    """Faults in one page's measurements (MEASURE_JS's result)."""
    faults = []
    for eq in m["equations"]:
        name = eq["where"] or "(unlabelled)"
        if eq["over"] > 1:
            faults.append(f"equation {name} overflows the column by {eq['over']:.0f} px "
                          f"({eq['width']:.0f} px wide)")
        if eq.get("clash", 0) > 1:
            faults.append(f"equation {name}: its number sits on the formula")
    for fig in m["figures"]:
        if fig["scale"] < min_scale:
            faults.append(f"figure {fig['where']} shown at {fig['scale']:.2f} of its size "
                          f"({fig['natural']} px wide, shown {fig['width']:.0f} px, "
                          f"{fig['of_column']:.0%} of the column): labels ~{15.3 * fig['scale']:.0f} px")
        if fig.get("text_px") is not None and fig["text_px"] < min_text:
            faults.append(f"figure {fig['where']}: its smallest text ({fig['text_pt']:g} pt at "
                          f"{fig['dpi']:.0f} dpi, {fig['natural']} px wide, "
                          f"shown {fig['width']:.0f} px) "
                          f"is {fig['text_px']:.1f} px high, under {min_text:g} px")
        if fig.get("right", 0) > m.get("viewport", float("inf")) + 1:
            faults.append(f"figure {fig['where']} runs off the page (right edge {fig['right']:.0f} px)")
    if m["code"]["wide"]:
        where = ", ".join(sorted({b["where"] for b in m["code"]["boxes"]})[:3])
        faults.append(f"{m['code']['wide']} code lines wider than their box ({where})")
    for w in m.get("outputs", {}).get("wrapped", []):
        faults.append(f"output {w['where']}: {w['lines']} lines shown on {w['shown']} (wrapped)")
    return faults


def _fault_tops(m: dict, min_scale: float, min_text: float = MIN_TEXT_PX) -> list[float]:
    return ([e["top"] for e in m["equations"] if e["over"] > 1 or e.get("clash", 0) > 1]
            + [f["top"] for f in m["figures"]
               if f["scale"] < min_scale or f.get("text_px", min_text) < min_text]
            + [b["top"] for b in m["code"]["boxes"]]
            + [w["top"] for w in m.get("outputs", {}).get("wrapped", [])])


def check_layout(root: Path, pages: list[Path], args) -> tuple[dict, dict]:
    """Open every page, ``args.jobs`` browsers at a time; (measurements, faults) by page."""
    binary = find_browser()
    if binary is None:
        raise RuntimeError("no Chromium found (Debian: apt-get install -y chromium); "
                           "--static-only runs the raw-MyST check alone")
    report: dict[str, dict] = {}
    faults: dict[str, list[str]] = {}
    errors: list[BaseException] = []

    def work(share: list[Path]) -> None:
        try:
            browser = Browser(binary, width=args.width, blocked=BLOCKED)
        except BaseException as e:  # noqa: BLE001 - reported by the caller
            errors.append(e)
            return
        try:
            for page in share:
                name = str(page.relative_to(root))
                browser.open(page.resolve().as_uri())
                m = json.loads(browser.evaluate(MEASURE_JS))
                for fig in m["figures"]:
                    figure_text(fig, page)
                report[name] = m
                found = layout_faults(m, args.min_scale, args.min_text)
                if found:
                    faults[name] = found
                if args.screenshots:
                    stem = name.replace("/", "__").removesuffix(".html")
                    browser.screenshot(args.screenshots / f"{stem}.png")
                    for i, top in enumerate(_fault_tops(m, args.min_scale, args.min_text)[:5]):
                        browser.screenshot(args.screenshots / f"{stem}__fault{i}.png", top=top)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
        finally:
            browser.close()

    jobs = max(1, min(args.jobs, len(pages)))
    threads = [threading.Thread(target=work, args=(pages[i::jobs],)) for i in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return report, faults


# --- JupyterLab ------------------------------------------------------------------------------

# JupyterLab settings for the check: every cell rendered (no windowing), the notebook never saved
# (JupyterLab marks it changed once its kernel starts), no news or update checks.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings":
        {"fetchNews": "false", "checkForUpdates": False},
}

# jupyterlab-myst renders a Markdown cell into a widget of class "myst"; without it JupyterLab's
# own renderer (.jp-RenderedMarkdown) shows the MyST as text.
LAB_STATE_JS = r"""
(() => {
  // the notebook on show (a notebook opened before stays open in a hidden tab)
  const cells = [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-MarkdownCell')];
  return JSON.stringify({
    cells: cells.length,
    myst: cells.filter(c => c.querySelector('.myst')).length,
    text: cells.map(c => (c.querySelector('.myst') || c.querySelector('.jp-RenderedMarkdown') || c).innerText)
               .join('\n')
  });
})()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class JupyterLab:
    """``jupyter lab`` on 127.0.0.1 for the length of a ``with`` block, with its own settings."""

    def __init__(self, root: Path, timeout: float = 90):
        self.root, self.timeout = root, timeout
        self.port, self.token = _free_port(), secrets.token_hex(16)
        self.tmp = Path(tempfile.mkdtemp(prefix="check-lab-"))

    def __enter__(self) -> "JupyterLab":
        for name, value in LAB_SETTINGS.items():
            path = self.tmp / "settings" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(value))
        env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(self.tmp / "runtime"))
        cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={self.port}",
               "--ip=127.0.0.1", f"--ServerApp.token={self.token}",
               f"--ServerApp.root_dir={self.root}", f"--LabApp.user_settings_dir={self.tmp / 'settings'}",
               f"--LabApp.workspaces_dir={self.tmp / 'workspaces'}"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-root")
        self.log = open(self.tmp / "lab.log", "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                with urllib.request.urlopen(self.url("api/status"), timeout=5) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.__exit__(None, None, None)
                raise RuntimeError("JupyterLab did not start:\n"
                                   + (self.tmp / "lab.log").read_text()[-3000:])
            time.sleep(0.5)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}?token={self.token}"

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # the server and the kernels it started
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def markdown_source(notebook: Path) -> tuple[int, str]:
    cells = [c for c in json.loads(notebook.read_text(encoding="utf-8"))["cells"]
             if c["cell_type"] == "markdown"]
    return len(cells), "\n".join("".join(c["source"]) for c in cells)


def check_jupyterlab(notebooks: list[Path], screenshots: Path | None = None,
                     timeout: float = 120) -> dict[str, list[str]]:
    """Open each notebook in JupyterLab; faults by notebook (MyST not rendered, raw MyST left)."""
    binary = find_browser()
    if binary is None:
        raise RuntimeError("no Chromium found (Debian: apt-get install -y chromium)")
    faults: dict[str, list[str]] = {}
    with JupyterLab(ROOT) as lab:
        browser = Browser(binary, width=1400, height=1000, timeout=timeout)
        try:
            for nb in notebooks:
                rel = nb.resolve().relative_to(ROOT).as_posix()
                n_cells, source = markdown_source(nb)
                in_source = len(RAW_IN_CODE.findall(source))
                started = time.monotonic()
                browser.open(lab.url(f"lab/tree/{rel}"))
                while True:  # until every Markdown cell is rendered by MyST, or the time is up
                    state = json.loads(browser.evaluate(LAB_STATE_JS))
                    done = state["cells"] == n_cells and state["myst"] == n_cells
                    if done or time.monotonic() - started > timeout:
                        break
                    time.sleep(0.5)
                if done:
                    time.sleep(1.0)  # math and cross-references settle after the first render
                    state = json.loads(browser.evaluate(LAB_STATE_JS))
                raw = raw_in_text(state["text"])
                found = []
                if not done:
                    found.append(f"{state['myst']} of {n_cells} Markdown cells rendered by MyST after "
                                 f"{timeout:.0f} s ({state['cells']} on the page): is jupyterlab-myst "
                                 "installed and enabled?")
                found += [f"raw MyST: {s!r}" for s in raw[:5]]
                if found:
                    faults[rel] = found
                print(f"{'FAIL' if found else 'ok  '} JupyterLab {rel}: {state['myst']} of {n_cells} "
                      f"Markdown cells rendered by MyST in {time.monotonic() - started:.0f} s; "
                      f"{in_source} directives and roles in the source, {len(raw)} left as text"
                      + "".join(f"\n     {f}" for f in found), flush=True)
                if screenshots:
                    browser.screenshot(screenshots / f"jupyterlab__{rel.replace('/', '__')}.png")
        finally:
            browser.close()
    return faults


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("html", nargs="?", default="_build/html", help="the built book (HTML folder)")
    ap.add_argument("--static-only", action="store_true",
                    help="only the raw-MyST check; open no browser")
    ap.add_argument("--width", type=int, default=1400, help="viewport width in CSS px")
    ap.add_argument("--min-scale", type=float, default=MIN_SCALE,
                    help="smallest scale a figure may be shown at (shown / natural width)")
    ap.add_argument("--min-text", type=float, default=MIN_TEXT_PX,
                    help="smallest text a figure may show, in CSS px")
    ap.add_argument("--jobs", type=int, default=2, help="browsers opening pages side by side")
    ap.add_argument("--only", action="append", default=[],
                    help="check only pages whose path matches this glob (repeatable)")
    ap.add_argument("--screenshots", type=Path,
                    help="save a PNG of every page's first screen and of each fault here")
    ap.add_argument("--json", type=Path, help="write every page's measurements here")
    ap.add_argument("--jupyterlab", nargs="+", type=Path, metavar="NOTEBOOK", default=[],
                    help="also open these notebooks in JupyterLab and check their MyST rendering")
    ap.add_argument("--lab-only", action="store_true",
                    help="with --jupyterlab: check only the notebooks in JupyterLab, not the book")
    args = ap.parse_args(argv)
    started = time.monotonic()
    if args.screenshots:
        args.screenshots.mkdir(parents=True, exist_ok=True)
    if args.lab_only:
        if not args.jupyterlab:
            ap.error("--lab-only needs --jupyterlab NOTEBOOK")
        try:
            return 1 if check_jupyterlab(args.jupyterlab, args.screenshots) else 0
        except RuntimeError as e:
            print(f"FAIL: {e}")
            return 1

    root = Path(args.html)
    pages = sorted(p for p in root.rglob("*.html")
                   if not {"_static", "_sources", "_images"} & set(p.relative_to(root).parts))
    # not the generated index, search and module-index pages, nor the root's redirect
    pages = [p for p in pages if p.name not in {"genindex.html", "search.html", "py-modindex.html"}
             and 'http-equiv="refresh"' not in p.read_text(encoding="utf-8")[:2000].lower()]
    if args.only:
        pages = [p for p in pages
                 if any(fnmatch.fnmatch(str(p.relative_to(root)), g) for g in args.only)]
    if not pages:
        print(f"FAIL: no pages under {root}: build the book first (jupyter-book build .)")
        return 1
    faults: dict[str, list[str]] = {}
    raw_pages = table_pages = n_tables = 0
    for page in pages:
        text = page.read_text(encoding="utf-8")
        raw, tables = raw_myst(text), raw_tables(text)
        found = [f"raw MyST: {s!r}" for s in raw[:5]] + (
            [f"... and {len(raw) - 5} more"] if len(raw) > 5 else [])
        found += [f"table shown as pipe text: {t!r}" for t in tables[:5]] + (
            [f"... and {len(tables) - 5} more"] if len(tables) > 5 else [])
        raw_pages += bool(raw)
        table_pages += bool(tables)
        n_tables += len(tables)
        if found:
            faults[str(page.relative_to(root))] = found
    static = (f"{raw_pages} with raw directive or role text; {n_tables} tables shown as pipe text "
              f"(on {table_pages} pages)")
    if args.static_only:
        for name, found in faults.items():
            print(f"FAIL {name}" + "".join(f"\n     {f}" for f in found))
        print(f"{len(pages)} pages scanned for raw MyST and pipe tables (no browser opened): {static}")
        return 1 if faults else 0

    try:
        report, layout = check_layout(root, pages, args)
    except RuntimeError as e:
        print(f"FAIL: {e}")
        return 1
    for name, found in layout.items():
        faults.setdefault(name, []).extend(found)
    for name in sorted(faults):
        print(f"FAIL {name}" + "".join(f"\n     {f}" for f in faults[name]))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    eqs = [e for m in report.values() for e in m["equations"]]
    figs = [f for m in report.values() for f in m["figures"]]
    outs = [m.get("outputs", {}) for m in report.values()]
    print(f"{len(pages)} pages at {args.width} px in {time.monotonic() - started:.0f} s: "
          f"{static}; "
          f"{sum(e['over'] > 1 or e['clash'] > 1 for e in eqs)} of {len(eqs)} display equations "
          f"overflow or sit under their number; "
          f"{sum(f['scale'] < args.min_scale for f in figs)} of {len(figs)} figures shown below "
          f"{args.min_scale:.2f} of their size; "
          f"{sum(f['text_px'] < args.min_text for f in figs)} of {len(figs)} figures with text "
          f"under {args.min_text:g} px; "
          f"{sum(m['code']['wide'] for m in report.values())} of "
          f"{sum(m['code']['lines'] for m in report.values())} code lines wider than their box; "
          f"{sum(len(o.get('wrapped', [])) for o in outs)} of {sum(o.get('blocks', 0) for o in outs)} "
          f"output blocks wrapped ({sum(o.get('scrolling', 0) for o in outs)} scroll sideways instead)",
          flush=True)
    if args.jupyterlab:
        try:
            faults.update(check_jupyterlab(args.jupyterlab, args.screenshots))
        except RuntimeError as e:
            print(f"FAIL: {e}")
            return 1
    return 1 if faults else 0


if __name__ == "__main__":
    sys.exit(main())
