"""Print benchmark rows (a list of dicts) as an aligned table."""
from __future__ import annotations


def print_rows(rows: list[dict], title: str = "") -> None:
    if title:
        print(f"\n== {title} ==")
    if not rows:
        return
    cols = list(rows[0])
    width = {c: max(len(c), *(len(_s(r[c])) for r in rows)) for c in cols}
    print("  ".join(c.ljust(width[c]) for c in cols))
    for r in rows:
        print("  ".join(_s(r[c]).ljust(width[c]) for c in cols))


def _s(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)
