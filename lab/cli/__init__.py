"""``python -m lab``: run experiments from the shell, or under torchrun.

The command line lives here, one small module per subcommand (``lab.cli.train``,
``lab.cli.pipeline``, ...), each with ``parser()`` and ``main(argv)``, and the parsing helpers
they share in ``lab.cli.args``: names checked against every registry (a did-you-mean, or a
pointer to the flag that takes a name of another kind) and numbers against their range, at
parse time, before any process starts. Nothing else in ``lab`` imports it.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from .args import _close

#: subcommand -> its module under ``lab.cli`` (each has ``parser()``, ``main(argv)`` and ``HELP``)
COMMANDS = ("train", "list", "pipeline", "ensemble", "hogwild", "advise", "bench")

__all__ = ["main"]

DESCRIPTION = """run experiments from the shell, or under torchrun:

    python -m lab train --model mlp --data digits --workers 4 --steps 200 \\
        --compressor fp16 --network 1Gbps --out runs/fp16
    torchrun --nproc-per-node 4 -m lab train --model mlp --compressor topk --compressor-kw density=0.01
    python -m lab list           # models, data sets, codecs, aggregators, networks
    python -m lab bench launch   # benchmarks (see python -m lab bench --help)
    python -m lab COMMAND --help # the flags of COMMAND
"""


def main(argv: list[str] | None = None) -> int:
    """``python -m lab COMMAND ARGS``: run ``COMMAND`` (its exit status), or print the
    commands. An unknown command gets a did-you-mean."""
    # [*argv], not list(argv): importing the submodule lab.cli.list makes ``list`` it, here
    argv = sys.argv[1:] if argv is None else [*argv]
    if argv[:1] and argv[0] in COMMANDS:
        return importlib.import_module(f"{__name__}.{argv[0]}").main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m lab", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        sub.add_parser(name, help=importlib.import_module(f"{__name__}.{name}").HELP)
    if argv[:1] and not argv[0].startswith("-"):
        hint = _close(argv[0], COMMANDS)[0]
        parser.error(f"unknown command {argv[0]!r}" + (f"; did you mean {hint!r}?" if hint else "")
                     + f" (commands: {', '.join(COMMANDS)})")
    parser.parse_args(argv)  # --help, or no command: argparse says so and exits
    return 2
