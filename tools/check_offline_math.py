"""Check, as a reader without internet would, that the built book renders its math.

    python tools/check_offline_math.py [_build/html] [--pages N] [--static-only]

Every page of the build is scanned for resources it would fetch from another host (a
``<script src>``, stylesheet or image on http(s)); then each page with math is opened in headless
Chromium with the network off (a fresh network namespace, ``unshare -n``, where the system
allows it; otherwise every host name is made unresolvable) and its rendered DOM is checked: no
raw ``\\(`` / ``\\[`` / ``$$`` delimiters left in the visible text, and MathJax's
``mjx-container`` output elements present. A control page, the same page pointed at MathJax on a
CDN, must fail the same check, so the check is known to be able to fail. Exit status 0 = all good.
Chromium comes from the system package manager (Debian: ``apt-get install -y chromium``).
"""
from __future__ import annotations

import argparse
import html.parser
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CDN_MATHJAX = "https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-chtml.js"
RAW_DELIMITERS = ("\\(", "\\[", "$$", "\\begin{")
_TAG = re.compile(r"<(script|link|img|iframe)\b[^>]*>", re.IGNORECASE)
_REMOTE_URL = re.compile(r"\b(?:src|href)=[\"']?((?:https?:)?//[^\"'\s>]+)", re.IGNORECASE)
_FETCHED_LINK = re.compile(r"\brel=[\"']?(stylesheet|preload|icon)", re.IGNORECASE)


def find_browser() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def remote_resources(page_html: str) -> list[str]:
    """URLs on other hosts that loading this page would fetch (links a reader clicks are fine)."""
    found = []
    for tag in _TAG.finditer(page_html):
        url, whole = _REMOTE_URL.search(tag.group(0)), tag.group(0)
        if url is None or (tag.group(1).lower() == "link" and not _FETCHED_LINK.search(whole)):
            continue  # local, or a <link rel="canonical"> and the like, which is not fetched
        found.append(url.group(1))
    return found


def _isolation() -> list[str]:
    """Run the browser with no network: a new network namespace if we may create one."""
    try:
        probe = subprocess.run(["unshare", "-n", "true"], capture_output=True, timeout=10)
        ok = probe.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return ["unshare", "-n"] if ok else []


def render(page: Path, browser: str, budget_ms: int = 10000, timeout: float = 120) -> str:
    """The DOM of ``page`` after its scripts ran, in headless Chromium with the network off."""
    with tempfile.TemporaryDirectory(prefix="offline-math-") as profile:
        cmd = [*_isolation(), browser, "--headless", "--no-sandbox", "--disable-gpu",
               "--disable-quic", "--no-first-run", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}",
               # even outside a namespace: no name resolves, and any proxy use goes nowhere
               "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=http://127.0.0.1:9",
               f"--virtual-time-budget={budget_ms}", "--dump-dom", page.resolve().as_uri()]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0 or "<html" not in out.stdout.lower():
        raise RuntimeError(f"{browser} could not render {page} (exit {out.returncode}):\n"
                           f"{out.stderr[-2000:]}")
    return out.stdout


class _Visible(html.parser.HTMLParser):
    """Visible text of a DOM dump (no scripts, styles or code), and the mjx-container count."""

    HIDDEN = {"script", "style", "noscript", "template", "pre", "code", "textarea"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.depth, self.text, self.containers = 0, [], 0

    def handle_starttag(self, tag, attrs):
        self.containers += tag == "mjx-container"
        self.depth += tag in self.HIDDEN

    def handle_endtag(self, tag):
        self.depth -= tag in self.HIDDEN and self.depth > 0

    def handle_data(self, data):
        if not self.depth:
            self.text.append(data)


def math_status(dom: str) -> tuple[int, list[str]]:
    """(number of mjx-container elements, raw-delimiter snippets visible to a reader)."""
    parser = _Visible()
    parser.feed(dom)
    text = "".join(parser.text)
    raw = [text[max(0, i - 30):i + 50].strip() for d in RAW_DELIMITERS
           for i in [m.start() for m in re.finditer(re.escape(d), text)][:3]]
    return parser.containers, raw


def check_page(page: Path, browser: str) -> list[str]:
    containers, raw = math_status(render(page, browser))
    problems = [f"raw math visible: {s!r}" for s in raw]
    if containers == 0:
        problems.append("no mjx-container: MathJax did not typeset the page")
    return problems


def control_fails(page: Path, browser: str) -> bool:
    """The same page with MathJax from a CDN must show raw math offline (the check can fail)."""
    text = page.read_text(encoding="utf-8")
    online, n = re.subn(r'src="[^"]*_static/mathjax/tex-chtml\.js(\?[^"]*)?"', f'src="{CDN_MATHJAX}"', text)
    if n != 1:
        raise RuntimeError(f"{page}: expected one local MathJax <script>, found {n}")
    control = page.with_name(f"_offline_control_{page.name}")
    try:
        control.write_text(online, encoding="utf-8")
        return bool(check_page(control, browser))
    finally:
        control.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("html", nargs="?", default="_build/html", help="the built book (HTML folder)")
    ap.add_argument("--pages", type=int, default=0, help="render at most N math pages (0: all)")
    ap.add_argument("--static-only", action="store_true",
                    help="only scan the pages for remote resources; open no browser")
    args = ap.parse_args(argv)
    root = Path(args.html)
    if not (root / "_static" / "mathjax" / "tex-chtml.js").is_file():
        print(f"FAIL: {root}/_static/mathjax/tex-chtml.js is missing: build the book first "
              "(jupyter-book build .), with sphinx-mathjax-offline installed")
        return 1
    pages = sorted(p for p in root.rglob("*.html") if "_static" not in p.parts)
    failures = 0
    for page in pages:
        urls = remote_resources(page.read_text(encoding="utf-8"))
        if urls:
            failures += 1
            print(f"FAIL {page.relative_to(root)} fetches from other hosts: {sorted(set(urls))}")
    if args.static_only:
        print(f"{len(pages)} pages scanned (no browser opened), {failures} failed")
        return 1 if failures or not pages else 0
    browser = find_browser()
    if browser is None:
        print("FAIL: no Chromium found (Debian: apt-get install -y chromium)")
        return 1
    math_pages = [p for p in pages if 'class="math' in p.read_text(encoding="utf-8")]
    if args.pages:
        math_pages = math_pages[:args.pages]
    for page in math_pages:
        problems = check_page(page, browser)
        failures += bool(problems)
        print(f"{'FAIL' if problems else 'ok  '} {page.relative_to(root)}"
              + "".join(f"\n     {p}" for p in problems[:5]), flush=True)
    if math_pages and not control_fails(math_pages[0], browser):
        failures += 1
        print("FAIL the control page (MathJax from a CDN) rendered offline: the network is not off")
    print(f"{len(pages)} pages scanned, {len(math_pages)} rendered offline "
          f"({'network namespace' if _isolation() else 'host names unresolvable'}), "
          f"{failures} failed")
    return 1 if failures or not math_pages else 0


if __name__ == "__main__":
    sys.exit(main())
