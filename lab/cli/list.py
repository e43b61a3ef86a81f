"""``python -m lab list``: what can be named in a config or on the command line."""
from __future__ import annotations

from .args import parser as new_parser
from .formatting import with_defaults

HELP = "what can be named in a config"


def parser():
    """The parser of ``python -m lab list`` (no flags)."""
    return with_defaults(new_parser("python -m lab list", __doc__))


def main(argv=None) -> int:
    """Print the names of every registry: models, data, codecs, aggregators, networks, ..."""
    parser().parse_args(argv)
    from .. import aggregate, attack, averaging, compress, data, models, schedule, sync
    from ..comm import PRESETS
    print("models:      ", ", ".join(models.names()))
    print("data:        ", ", ".join(data.names()))
    print("compressors: ", ", ".join(compress.names()))
    print("aggregators: ", ", ".join(aggregate.REGISTRY.names()))
    print("schedules:   ", ", ".join(schedule.REGISTRY.names()))
    print("averaging:   ", ", ".join(averaging.REGISTRY.names()))
    print("sync modes:  ", ", ".join(sync.REGISTRY.names()))
    print("attacks:     ", ", ".join(attack.REGISTRY.names()))
    print("networks:    ", ", ".join(f"{k} ({v.label})" for k, v in PRESETS.items()),
          "or e.g. '100Mbps,2ms'")
    return 0
