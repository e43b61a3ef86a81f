"""What every ``python -m lab`` command's ``--help`` and errors share beyond parsing.

- :class:`~lab.helpformat.HelpFormatter` and :data:`~lab.helpformat.EXIT_STATUS` (from
  :mod:`lab.helpformat`, which the benchmarks share): the description kept as written, every
  flag's default at the end of its help unless the help already says it, the exit statuses.
- :func:`link_type`: the ``--network`` type of ``lab.cli.args.network_type``, but a link
  written as 'BANDWIDTH,LATENCY' with a number that lacks its unit is told so
  ("the latency '2' needs a unit") instead of being offered a preset.
- :func:`interrupted`: the one line Ctrl-C ends with.
- :func:`quiet`: under torchrun, whether this rank leaves an error every rank meets alike to
  its node's first rank (one line per node, not one per rank); :func:`tell_torchrun`, the
  line torchrun's failure summary shows.
"""
from __future__ import annotations

import argparse
import os
import sys

from ..helpformat import EXIT_STATUS, HelpFormatter, shows_default, with_defaults  # noqa: F401

#: The exit status of a command interrupted by Ctrl-C (128 + SIGINT, as shells report it).
INTERRUPTED = 130


def quiet() -> bool:
    """Whether this process is one of several torchrun started on a node, other than the
    first: an error every rank meets alike (a bad flag, a config refused) is then left to the
    node's first rank, which says it once, and this one exits quietly with the same status."""
    return "WORLD_SIZE" in os.environ and os.environ.get("LOCAL_RANK", "0") != "0"


def tell_torchrun(line: str) -> None:
    """Under torchrun, give ``line`` (why this rank stops) to its error file, so that the
    failure summary torchrun prints names the cause instead of linking to its docs."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    import json
    import time
    try:
        with open(path, "w") as f:
            json.dump({"message": {"message": line,
                                   "extraInfo": {"timestamp": str(int(time.time()))}}}, f)
    except OSError:
        pass


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
