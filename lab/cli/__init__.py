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

from .args import Parser, _close
from .formatting import EXIT_STATUS, interrupted

#: subcommand -> its module under ``lab.cli`` (each has ``parser()``, ``main(argv)`` and ``HELP``)
COMMANDS = ("train", "list", "pipeline", "ensemble", "hogwild", "advise", "sim", "bench")

__all__ = ["main"]

DESCRIPTION = """run experiments from the shell, or under torchrun:

    python -m lab train --model mlp --data digits --workers 4 --steps 200 \\
        --compressor fp16 --network 1Gbps --out runs/fp16
    torchrun --nproc-per-node 4 -m lab train --model mlp --compressor topk --compressor-kw density=0.01
    python -m lab list           # models, data sets, compressors, aggregators, networks
    python -m lab advise --model mlp --workers 8 --network 1Gbps,1ms   # which method (Part 10)
    python -m lab bench launch   # benchmarks (see python -m lab bench --help)
    python -m lab COMMAND --help # the flags of COMMAND, with their defaults
"""


def main(argv: list[str] | None = None) -> int:
    """``python -m lab COMMAND ARGS``: run ``COMMAND`` (its exit status), or print the
    commands. An unknown command gets a did-you-mean; Ctrl-C ends a command with one line on
    stderr and exit status 130."""
    # [*argv], not list(argv): importing the submodule lab.cli.list makes ``list`` it, here
    argv = sys.argv[1:] if argv is None else [*argv]
    if argv[:1] and argv[0] in COMMANDS:
        try:
            return importlib.import_module(f"{__name__}.{argv[0]}").main(argv[1:])
        except KeyboardInterrupt:   # the launch ended every rank on its way out
            return interrupted()
    parser = Parser(prog="python -m lab", description=DESCRIPTION, epilog=EXIT_STATUS,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        sub.add_parser(name, help=importlib.import_module(f"{__name__}.{name}").HELP)
    if argv[:1] and argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        parser.error(f"unrecognized argument {argv[0]}: the command comes first, its flags "
                     f"after it (commands: {', '.join(COMMANDS)})")
    if argv[:1] and not argv[0].startswith("-"):
        hint = _close(argv[0], COMMANDS)[0]
        parser.error(f"unknown command {argv[0]!r}" + (f"; did you mean {hint!r}?" if hint else "")
                     + f" (commands: {', '.join(COMMANDS)})")
    parser.parse_args(argv)  # --help, or no command: argparse says so and exits
    return 2
