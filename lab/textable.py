"""Rows of dicts as an aligned plain-text table (run summaries, benchmark results)."""
from __future__ import annotations

from typing import Callable


def format_rows(rows: list[dict], cell: Callable[[object], str] = str, rule: bool = True) -> str:
    """Columns from the rows' keys in first-seen order (a row without a column shows "-");
    ``cell`` turns a value into text."""
    if not rows:
        return ""
    cols = list(dict.fromkeys(k for r in rows for k in r))
    text = [{c: cell(r[c]) if c in r else "-" for c in cols} for r in rows]
    width = {c: max(len(c), *(len(t[c]) for t in text)) for c in cols}
    head = "  ".join(c.ljust(width[c]) for c in cols)
    body = ["  ".join(t[c].ljust(width[c]) for c in cols) for t in text]
    return "\n".join([head, *(["-" * len(head)] if rule else []), *body])
