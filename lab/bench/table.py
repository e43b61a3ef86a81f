"""Print benchmark rows (a list of dicts) as an aligned table; time a call."""
from __future__ import annotations

import statistics
import time

from ..textable import format_rows


def bench_parser(name: str, doc: str):
    """The parser of ``python -m lab bench NAME``: the module's docstring as its description,
    each flag's default in its help, the exit statuses below (as every ``lab`` command)."""
    import argparse

    from ..helpformat import with_defaults
    return with_defaults(argparse.ArgumentParser(prog=f"python -m lab bench {name}",
                                                 description=plain(doc)))


def plain(doc: str) -> str:
    """A docstring as a terminal shows it: no reST roles or literals, no issue numbers."""
    import re
    doc = re.sub(r":\w+:`~?([^`]+)`", r"\1", doc).replace("``", "")
    doc = re.sub(r" ?\(issue \d+\)", "", doc)
    return re.sub(r"\(issue \d+, ", "(", doc)


def print_rows(rows: list[dict], title: str = "") -> None:
    """``rows`` as a table under ``title``; how their numbers were made (each row's ``made``,
    :mod:`lab.bench.made`) once under the title where the rows share it, else as a column."""
    from .made import describe
    if title:
        print(f"\n== {title} ==")
    made = [r.get("made") for r in rows]
    shared = bool(rows) and made[0] is not None and all(m == made[0] for m in made)
    if shared:
        print(f"(made: {describe(made[0])})")
    rows = [{**{k: v for k, v in r.items() if k != "made"},
             **({"made": describe(m)} if m and not shared else {})} for r, m in zip(rows, made)]
    if rows:
        print(format_rows(rows, cell=_s, rule=False))


def _s(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def median_seconds(fn, repeats: int) -> float:
    """Median wall time of ``fn()`` over ``repeats`` calls, after one warm-up call (allocator,
    first touch, lazy initialisation)."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def machine() -> str:
    """'<cpu model>, <n> cores' of this machine, for the provenance of stored measurements."""
    import os
    import platform
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            name = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), name)
    except OSError:
        pass
    return f"{name}, {os.cpu_count()} cores"
