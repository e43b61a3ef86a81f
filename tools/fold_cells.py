"""Fold the code of the book's plotting, claim and long setup cells (issue 49).

    python tools/fold_cells.py [NOTEBOOK_OR_FOLDER ...] [--check] [--list]

A reader of the built book meets the figure and the claim's verdict, not the 30 lines of
matplotlib or of bookkeeping that made them; the code stays one click away ("Show code cell
source"). This script adds the ``hide-input`` tag (myst-nb: the input is folded, the outputs
shown) to every code cell that is

* a **claim cell**: it calls ``claim(`` (``lab.nb.claim``), which displays the claim's record;
* a **plotting cell**: it has an image output, and the drawing is most of it: it opens its
  figure (``plt.subplots``) in its first three code lines or within the first 40% of them, or
  at least 40% of its lines draw (``plt``, ``ax``, ``fig``, ``legend``...). A cell that
  mostly computes and then plots stays open, its code being the lesson;
* a **long setup cell**: more than 40 code lines that print or display something, where the
  reader comes for the output (a benchmark's table) more than for its code.

A cell tagged ``show-input`` is never folded; nothing else about a notebook changes (no output,
no execution count, no other metadata). Each notebook is read, changed and written under an
exclusive ``flock`` on ``/tmp/nb.lock``, which the notebook runs and other writers also hold.
``--check`` changes nothing and exits 1 when a cell should be folded and is not; ``--list``
prints every cell the rules pick, with the rule.
"""
from __future__ import annotations

import argparse
import fcntl
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCK = Path("/tmp/nb.lock")
TAG, KEEP = "hide-input", "show-input"
LONG = 40           # code lines beyond which a setup cell is folded
PLOT_SHARE = 0.4    # share of drawing lines that makes a cell with a figure a plotting cell

CLAIM = re.compile(r"\bclaim\(")
OPENS_FIGURE = re.compile(r"\bplt\.(?:subplots|figure|subplot_mosaic)\(")
DRAWS = re.compile(r"\b(?:plt|ax|axs|axes|ax\d|fig|cax|twin)\b\s*[.\[]|\bviz\.|\bplot_\w*\(|"
                   r"\.(?:set_\w+|legend|plot|bar|barh|scatter|annotate|axhline|axvline|text|"
                   r"fill_between|step|imshow|colorbar|tick_params|semilogy|loglog|errorbar)\(")


def code_lines(source: str) -> list[str]:
    return [ln for ln in source.splitlines() if ln.strip() and not ln.strip().startswith("#")]


def rule(cell: dict) -> str | None:
    """Why this cell's input should be folded ("claim", "plot", "long"), or None."""
    if cell.get("cell_type") != "code":
        return None
    source = "".join(cell.get("source", ""))
    lines = code_lines(source)
    outputs = cell.get("outputs", [])
    if CLAIM.search(source):
        return "claim"
    if any("image/png" in o.get("data", {}) or "image/svg+xml" in o.get("data", {})
           for o in outputs):
        opens = next((j for j, ln in enumerate(lines) if OPENS_FIGURE.search(ln)), None)
        if opens is not None and (opens < 3 or opens <= PLOT_SHARE * len(lines)):
            return "plot"
        if lines and sum(bool(DRAWS.search(ln)) for ln in lines) >= PLOT_SHARE * len(lines):
            return "plot"
    if len(lines) > LONG and outputs:
        return "long"
    return None


def fold(nb: dict) -> list[tuple[int, str, bool]]:
    """Tag the cells the rules pick; (cell index, rule, newly tagged) for each of them."""
    picked = []
    for i, cell in enumerate(nb["cells"]):
        why = rule(cell)
        tags = cell.get("metadata", {}).get("tags", [])
        if why is None or KEEP in tags:
            continue
        new = TAG not in tags
        if new:
            cell.setdefault("metadata", {})["tags"] = [*tags, TAG]
        picked.append((i, why, new))
    return picked


def notebooks(paths: list[str]) -> list[Path]:
    found: list[Path] = []
    for p in map(Path, paths or [str(ROOT / "book")]):
        if p.is_dir():
            found += sorted(q for q in p.rglob("*.ipynb") if ".ipynb_checkpoints" not in q.parts)
        elif p.suffix == ".ipynb":
            found.append(p)
        else:
            raise SystemExit(f"{p}: neither a notebook nor a folder")
    return found


def process(path: Path, write: bool) -> list[tuple[int, str, bool]]:
    """Fold one notebook under the lock: read, tag, write back only if something changed, in
    the layout nbformat writes (one-space indent, sorted keys, a final newline)."""
    with open(LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            text = path.read_text(encoding="utf-8")
            nb = json.loads(text)
            picked = fold(nb)
            if write and any(new for _, _, new in picked):
                path.write_text(json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n",
                                encoding="utf-8")
            return picked
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", help="notebooks or folders (default: book/)")
    ap.add_argument("--check", action="store_true",
                    help="change nothing; exit 1 if a cell should be folded and is not")
    ap.add_argument("--list", action="store_true", help="print every cell the rules pick")
    args = ap.parse_args(argv)
    counts = {"claim": 0, "plot": 0, "long": 0}
    missing = 0
    for path in notebooks(args.paths):
        picked = process(path, write=not args.check)
        for i, why, new in picked:
            counts[why] += 1
            missing += new
            if args.list or (args.check and new):
                state = ("not folded" if args.check else "folded now") if new else "folded"
                print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path} "
                      f"cell {i}: {why} ({state})")
    verb = "to fold" if args.check else "newly folded"
    print(f"{sum(counts.values())} cells picked ({counts['claim']} claim, "
          f"{counts['plot']} plotting, {counts['long']} long setup); {missing} {verb}")
    return 1 if args.check and missing else 0


if __name__ == "__main__":
    sys.exit(main())
