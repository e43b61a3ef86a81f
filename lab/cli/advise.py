"""``python -m lab advise``: methods ranked by predicted time to target on your cluster.

    python -m lab advise --model mlp --workers 8 --network 1Gbps,1ms
    python -m lab advise --params 25e6 --compute-ms 120 --workers 16 --network 10Gbps,0.1ms --json
"""
from __future__ import annotations

import json

from .args import integer, kind_type, number, parser as new_parser
from .formatting import link_type, with_defaults

HELP = "which method to use on a given cluster: python -m lab advise --help"


def parser():
    """The parser of ``python -m lab advise``."""
    from ..advise import METHODS
    ap = with_defaults(new_parser("python -m lab advise", __doc__))
    ap.add_argument("--model", default="mlp", type=kind_type("model", "advise"),
                    help="the model whose step is measured (with --params: whose traffic is "
                         "scaled and whose layer shapes the codecs are timed on)")
    ap.add_argument("--workers", type=integer(2), default=4, help="ranks (>= 2)")
    ap.add_argument("--network", default="1gbps", type=link_type("advise"),
                    help="the link: a preset (1gbps, 10gbps, ...) or 'BANDWIDTH,LATENCY', "
                         "e.g. 1Gbps,1ms")
    ap.add_argument("--target", type=number(0, 1, lo_open=True), default=None,
                    help="held-out accuracy to reach (default: the stored curves' target)")
    ap.add_argument("--params", type=number(0, lo_open=True), default=None,
                    help="your model's parameter count (with --compute-ms): --model's traffic "
                         "is scaled to it, and each codec's time per value is measured on this "
                         "machine, one process at a time (default: --model itself)")
    ap.add_argument("--compute-ms", type=number(0, lo_open=True), default=None,
                    help="your forward + backward time per step and rank, in ms (with --params; "
                         "default: --model's, measured)")
    ap.add_argument("--methods", nargs="+", default=None, type=kind_type("method", "advise"),
                    metavar="METHOD",
                    help=f"rank only these (default: all of {', '.join(METHODS)})")
    ap.add_argument("--no-cache", action="store_true", help="measure the profiles again")
    ap.add_argument("--no-probe", action="store_true",
                    help="a model without stored curves borrows the stored models' penalties "
                         "instead of having its curves measured once on two local ranks")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return ap


def main(argv=None) -> int:
    """``python -m lab advise ARGS``: the ranking, as a table or JSON."""
    from ..advise import advise
    ap = parser()
    a = ap.parse_args(argv)
    if (a.params is None) != (a.compute_ms is None):
        ap.error("--params and --compute-ms go together")
    try:
        ranked = advise(a.model, a.workers, a.network, a.methods, target=a.target,
                        params=None if a.params is None else int(a.params),
                        compute_ms=a.compute_ms, use_cache=not a.no_cache,
                        probe=not a.no_probe)
    except ValueError as err:
        ap.error(str(err))
    if a.json:
        print(json.dumps([r.as_dict() for r in ranked], indent=1))
        return 0
    print(f"{'rank':>4}  {'method':10s} {'family':15s} {'to target':>10s} {'ms/step':>8s} "
          f"{'steps':>6s}  why")
    for i, r in enumerate(ranked, 1):
        t = "never" if r.time_s == float("inf") else f"{r.time_s:.2f} s"
        print(f"{i:>4}  {r.method:10s} {r.family:15s} {t:>10s} {1e3 * r.step_s:8.2f} "
              f"{r.steps:6.0f}  {r.reason}")
    return 0
