"""How every ``--help`` of ``lab`` reads (the commands of :mod:`lab.cli` and the benchmarks
of :mod:`lab.bench`, which may not import the CLI): the description kept as written, each
flag's default at the end of its help, and the exit statuses below."""
from __future__ import annotations

import argparse

#: What a ``python -m lab`` command's exit status means.
EXIT_STATUS = """exit status: 0 done; 1 the run failed (train and pipeline write what it kept into
--out, with error.json); 2 refused before anything ran (a bad flag or configuration, an --out
that cannot be written); 130 interrupted (Ctrl-C): every rank was ended."""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """``RawDescriptionHelpFormatter`` that appends each flag's default to its help."""

    def _get_help_string(self, action):
        text = action.help or ""
        if not shows_default(action) or "default" in text.lower():
            return text
        return f"{text} (default: %(default)s)"


def shows_default(action) -> bool:
    """Whether ``action``'s default is worth printing: a value, not "off" or "none"."""
    d = action.default
    if d is None or d is False or d is argparse.SUPPRESS or d == []:
        return False
    if isinstance(action, (argparse._HelpAction, argparse._StoreTrueAction,
                           argparse._StoreFalseAction, argparse._VersionAction)):
        return False
    return bool(action.option_strings) or action.nargs in ("?", "*")


def with_defaults(parser):
    """``parser`` with :class:`HelpFormatter` and the exit statuses as its epilog."""
    parser.formatter_class = HelpFormatter
    if not parser.epilog:
        parser.epilog = EXIT_STATUS
    return parser
