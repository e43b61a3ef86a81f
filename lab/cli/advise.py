"""``python -m lab advise``: methods ranked by predicted time to target on your cluster.

    python -m lab advise --model mlp --workers 8 --network 1Gbps,1ms
    python -m lab advise --params 25e6 --compute-ms 120 --workers 16 --network 10Gbps,0.1ms --json

The first run on a machine profiles every method on --workers local ranks and times each codec
(about a minute on 2 cores at 16 ranks), saying so on stderr as it goes; the results are cached
in ~/.cache/lab/advise ($LAB_ADVISE_CACHE), so later runs answer in seconds. Codec times (and,
without --params, compute) are this machine's, and the table names it.
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
                        probe=not a.no_probe, progress=True)
    except ValueError as err:
        ap.error(str(err))
    if a.json:
        print(json.dumps([r.as_dict() for r in ranked], indent=1))
        return 0
    from ..advise.validated import band_text
    for line in provenance(a, ranked[0].machine if ranked else ""):
        print(line)
    print(f"{'rank':>4}  {'method':10s} {'family':15s} {'to target':>10s} {'ms/step':>8s} "
          f"{'band':>6s} {'codec ms':>8s} {'steps':>6s}  why [band: lab.sim's worst step-time "
          f"error on held-out kernel-link runs of the method's family]")
    for i, r in enumerate(ranked, 1):
        t = "never" if r.time_s == float("inf") else f"{r.time_s:.2f} s"
        band = "none" if r.band is None else f"+/-{100 * r.band:.0f}%"
        print(f"{i:>4}  {r.method:10s} {r.family:15s} {t:>10s} {1e3 * r.step_s:8.2f} "
              f"{band:>6s} {1e3 * r.codec_s:8.2f} {r.steps:6.0f}  {r.reason} "
              f"[{band_text(r.band, r.band_source)}]")
    return 0


def provenance(a, machine: str) -> list[str]:
    """The lines above the table: where each part of ms/step comes from, codec times labelled
    with the machine they were measured on."""
    from ..comm.network import Network
    link = Network.parse(a.network)
    if a.params is None:
        compute = (f"compute and codec ms this machine's ({machine}): measured on "
                   f"{a.workers} local ranks sharing its cores ({a.model})")
    else:
        compute = (f"compute {a.compute_ms:g} ms (--compute-ms); codec ms this machine's "
                   f"({machine}): timed per value in one process on one core, times "
                   f"{int(a.params):,} values (another CPU, or a GPU, will differ)")
    return [f"{a.workers} workers on {link.label}: ms/step = compute + codec + exposed "
            f"communication (the link's alpha-beta model)",
            f"  {compute}"]
