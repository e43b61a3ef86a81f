"""What every ``python -m lab`` command's ``--help`` and errors share beyond parsing.

- :class:`HelpFormatter`: the description kept as written (its examples), and every flag's
  default at the end of its help (``(default: 0.1)``), unless the help already says it or
  there is nothing to say (a flag that is off unless given; no value, when that means "none").
- :func:`link_type`: the ``--network`` type of ``lab.cli.args.network_type``, but a link
  written as 'BANDWIDTH,LATENCY' with a number that lacks its unit is told so
  ("the latency '2' needs a unit") instead of being offered a preset.
- :data:`EXIT_STATUS`: the exit statuses every command documents, and :func:`interrupted`, the
  one line Ctrl-C ends with.
"""
from __future__ import annotations

import argparse
import sys

#: What a ``python -m lab`` command's exit status means.
EXIT_STATUS = """exit status: 0 done; 1 the run failed (train and pipeline write what it kept into
--out, with error.json); 2 refused before anything ran (a bad flag or configuration, an --out
that cannot be written); 130 interrupted (Ctrl-C): every rank was ended."""

#: The exit status of a command interrupted by Ctrl-C (128 + SIGINT, as shells report it).
INTERRUPTED = 130


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


def with_defaults(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``parser`` with :class:`HelpFormatter` and the exit statuses as its epilog."""
    parser.formatter_class = HelpFormatter
    if not parser.epilog:
        parser.epilog = EXIT_STATUS
    return parser


def interrupted() -> int:
    """Say, in one line on stderr, that Ctrl-C ended the command; its exit status."""
    print("\ninterrupted (Ctrl-C): every rank was ended", file=sys.stderr)
    return INTERRUPTED


def _unitless(spec: str) -> str | None:
    """Why a 'BANDWIDTH,LATENCY' link spec fails because a number lacks its unit, or None."""
    for sep in ",@/":
        if sep in spec:
            bandwidth, _, latency = spec.partition(sep)
            break
    else:
        bandwidth, latency = spec, ""
    for what, part, units, example in (("bandwidth", bandwidth, "bps, kbps, Mbps, Gbps, Tbps",
                                        "100Mbps"),
                                       ("latency", latency, "s, ms, us", "2ms")):
        try:
            float(part.strip())
        except ValueError:
            continue
        return (f"the {what} {part.strip()!r} of {spec!r} needs a unit ({units}), e.g. "
                f"{example!r}: a link is 'BANDWIDTH,LATENCY' such as '100Mbps,2ms', or a preset")
    return None


def link_type(command: str = "train"):
    """An argparse ``type`` for ``--network``: :func:`lab.cli.args.network_type`, with a
    number that lacks its unit named as such."""
    from .args import network_type
    plain = network_type(command)

    def check(value: str) -> str:
        from ..comm import Network
        try:
            Network.parse(value)
            return value
        except ValueError:
            why = _unitless(value)
            if why is not None:
                raise argparse.ArgumentTypeError(why) from None
        return plain(value)
    check.__name__ = "network"
    return check
