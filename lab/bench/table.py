"""Print benchmark rows (a list of dicts) as an aligned table."""
from __future__ import annotations

from ..textable import format_rows


def print_rows(rows: list[dict], title: str = "") -> None:
    if title:
        print(f"\n== {title} ==")
    if rows:
        print(format_rows(rows, cell=_s, rule=False))


def _s(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)
