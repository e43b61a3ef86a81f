"""``python -m lab bench [NAME] [options]``: the benchmarks, listed below.

    python -m lab bench launch            # one benchmark; --quick: fewer sizes and repeats
    python -m lab bench p3 --help         # a benchmark with flags of its own
    python -m lab bench                   # all of them (long)

Four are built into this command (launch, collectives, codecs, topk: ``--quick`` is theirs);
every other module ``lab/bench/NAME.py`` with a ``main(argv)`` function is a benchmark too,
with its own flags (``python -m lab bench NAME --help``), so adding a benchmark is adding a file.
"""
from __future__ import annotations

import ast
import importlib
import pkgutil
import re
import sys

from .args import parser as new_parser
from .formatting import EXIT_STATUS, interrupted, with_defaults

HELP = "benchmarks: python -m lab bench --help"
BUILTIN = ("launch", "collectives", "codecs", "topk")
# modules of lab/bench that are parts of a benchmark, not benchmarks of their own
_HELPERS = {"table", "made", "turns", "__main__", "grid_runs", "grid_score", "grid_store",
            "p3_config", "p3_engine", "p3_schedules"}


def plugins() -> list[str]:
    """Benchmark modules with their own ``main(argv)`` (besides the built-in four)."""
    from .. import bench
    return sorted(m.name for m in pkgutil.iter_modules(bench.__path__)
                  if m.name not in _HELPERS and m.name not in BUILTIN)


def summary(name: str) -> str:
    """The first sentence of benchmark ``name``'s module docstring (read, not imported), without
    the command line some of them start with."""
    from .. import bench
    from ..bench.table import plain
    path = next(iter(bench.__path__)) + f"/{name}.py"
    with open(path) as f:
        doc = ast.get_docstring(ast.parse(f.read())) or ""
    first = " ".join(plain(doc).strip().split("\n\n")[0].split())
    first = re.sub(r"^python -m lab bench \S+(?: \[[^]]*\])*:\s*", "", first)
    return re.split(r"(?<=[a-z0-9)])\. ", first)[0].rstrip(".")


def listing() -> str:
    """Every benchmark with its one-line summary: the built-in ones, then the others."""
    rows = [(n, summary(n), "built in, --quick") for n in BUILTIN]
    rows += [(n, summary(n), "own flags") for n in plugins()]
    width = max(len(n) for n, _, _ in rows)
    lines = [f"  {n:<{width}}  {s} ({how})" for n, s, how in rows]
    return ("benchmarks:\n" + "\n".join(lines) + f"\n  {'all':<{width}}  every one of them"
            "\n\n" + EXIT_STATUS)


def parser():
    """The parser of ``python -m lab bench`` (each benchmark module parses its own flags)."""
    p = with_defaults(new_parser("python -m lab bench", __doc__))
    p.epilog = listing()
    p.add_argument("what", nargs="?", default="all", choices=[*BUILTIN, *plugins(), "all"],
                   metavar="NAME", help="which benchmark (listed below)")
    p.add_argument("--quick", action="store_true",
                   help="fewer sizes and repeats (the built-in four; the others take it as "
                        "their own flag)")
    return p


def main(argv=None) -> int:
    """``python -m lab bench ARGS``: run one benchmark (with its own flags) or all of them;
    Ctrl-C ends it with one line and exit status 130."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        return interrupted()


def _main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["codecs"]:  # its own options: --device, --sizes, --codecs, --json
        from ..bench.codecs import main as codecs_main
        codecs_main(argv[1:])
        return 0
    if argv[:1] and argv[0] in plugins():
        out = importlib.import_module(f"lab.bench.{argv[0]}").main(argv[1:])
        return out if isinstance(out, int) else 0
    a = parser().parse_args(argv)
    want = lambda w: a.what in (w, "all")  # noqa: E731
    from ..bench.table import print_rows
    if want("launch"):
        from ..bench.launch import run
        print_rows(run(repeats=2 if a.quick else 3), "launch time, 4 ranks")
    if want("collectives"):
        from ..bench.collectives import bookkeeping_us, fit, overhead
        print(f"\nlab.comm bookkeeping per call (timing + ledger record): {bookkeeping_us():.2f} us")
        print_rows(overhead(iters=50 if a.quick else 200),
                   "lab.comm allreduce vs raw torch.distributed (2 ranks)")
        ab, rows = fit(repeats=3 if a.quick else 5)
        print_rows(rows, "collective sweep (gloo, loopback)")
        print(f"\nfitted alpha = {ab.alpha * 1e6:.1f} us, beta = {ab.beta * 1e9:.3f} ns/B "
              f"(bandwidth {ab.bandwidth / 1e9:.2f} GB/s)")
    if want("codecs"):
        from ..bench.codecs import main as codecs_main
        codecs_main(["--quick"] if a.quick else [])
    if want("topk"):
        from ..bench.topk import main as topk_main
        topk_main()
    if a.what == "all":
        for name in plugins():
            print(f"\n== {name} (python -m lab bench {name}) ==")
            importlib.import_module(f"lab.bench.{name}").main(["--quick"] if a.quick else [])
    return 0
