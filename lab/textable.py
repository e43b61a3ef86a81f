"""Rows of dicts as an aligned plain-text table (run summaries, benchmark results)."""
from __future__ import annotations

from typing import Callable


def format_rows(rows: list[dict], cell: Callable[[object], str] = str, rule: bool = True) -> str:
    """Columns from the first row's keys; ``cell`` turns a value into text."""
    if not rows:
        return ""
    cols = list(rows[0])
    width = {c: max(len(c), *(len(cell(r[c])) for r in rows)) for c in cols}
    head = "  ".join(c.ljust(width[c]) for c in cols)
    body = ["  ".join(cell(r[c]).ljust(width[c]) for c in cols) for r in rows]
    return "\n".join([head, *(["-" * len(head)] if rule else []), *body])
