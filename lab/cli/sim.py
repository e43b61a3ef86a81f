"""``python -m lab sim``: predicted step time of a technique on a cluster (issue 52).

    python -m lab sim --model resnet50 --technique powersgd --workers 64 --network 10Gbps
    python -m lab sim --validate          # score the stored held-out runs (seconds)
    python -m lab sim --remeasure         # run them again on kernel links (minutes; root)
    python -m lab sim --validate --fresh  # model 2 on its own fresh draw (seed 53)
    python -m lab sim --validate --third  # model 3 on a third draw (seed 54)
    python -m lab sim --validate --fourth # model 4 on a fourth draw (seed 55)

Every prediction carries the error band of its technique's family on the stored held-out runs.
"""
from __future__ import annotations

import json

from .args import integer, number, parser as new_parser
from .formatting import with_defaults

#: the later draws, each the held-out test of one model: flag -> what it is
DRAWS = {"fresh": "the second model's fresh draw (seed 53), calibrated with the exchange's "
                  "off-wire time",
         "third": "the third model's draw (seed 54): a full-duplex server, a repeated "
                  "calibration, 30-step runs",
         "fourth": "the fourth model's draw (seed 55): model 3 with an allgather's loopback "
                   "floor measured per call"}
HELP = "predicted step time on a cluster, and the simulator's validation: python -m lab sim --help"


def parser():
    """The parser of ``python -m lab sim``."""
    from ..sim.codec import TECHNIQUES
    from ..sim.models import MODELS
    ap = with_defaults(new_parser("python -m lab sim", __doc__))
    ap.add_argument("--model", default="resnet50", choices=sorted(MODELS),
                    help="a model whose layers and FLOPs are stored (lab.sim.models)")
    ap.add_argument("--technique", default="fp32", choices=list(TECHNIQUES),
                    help="the book's technique whose step is predicted (lab.sim.codec)")
    ap.add_argument("--workers", type=integer(2), default=16, help="ranks (>= 2)")
    ap.add_argument("--per-node", type=integer(1), default=1, help="ranks sharing a NIC")
    ap.add_argument("--network", default="10Gbps", help="NIC rate, e.g. 10Gbps or 100Gbps,5us")
    ap.add_argument("--device-tflops", type=number(0, lo_open=True), default=100.0,
                    help="sustained device rate the model's FLOPs are divided by (TFLOP/s)")
    ap.add_argument("--batch", type=integer(1), default=32, help="samples per rank and step")
    ap.add_argument("--validate", action="store_true", help="score the stored held-out runs")
    ap.add_argument("--remeasure", action="store_true",
                    help="re-run the drawn configurations on kernel links, then score them")
    ap.add_argument("--draw", action="store_true", help="write the seeded draw (never run)")
    for flag, what in DRAWS.items():
        ap.add_argument(f"--{flag}", action="store_true",
                        help=f"with --draw/--remeasure/--validate: {what}")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return ap


def main(argv=None) -> int:
    """``python -m lab sim ARGS``."""
    from ..sim import validate
    ap = parser()
    a = ap.parse_args(argv)
    named = [f for f in DRAWS if getattr(a, f)]
    if len(named) > 1:
        ap.error(f"{' and '.join('--' + f for f in named)} name different draws: give one")
    flag = "".join(" --" + f for f in named)
    drawn, out, spec, also = validate.CAMPAIGNS[named[0] if named else ""]
    if a.draw:
        drawn.parent.mkdir(parents=True, exist_ok=True)
        seed = validate.SEEDS[drawn]
        body = {"_meta": validate.provenance("python -m lab sim --draw" + flag),
                "seed": seed, "configs": validate.draw(seed=seed)}
        drawn.write_text(json.dumps(body, indent=1))
        print(f"wrote {len(body['configs'])} configurations to {drawn}")
        return 0
    if a.remeasure:
        validate.campaign(drawn, out, progress=lambda s: print(s, flush=True), spec=spec,
                          also=also, command="python -m lab sim --remeasure" + flag)
    if a.validate or a.remeasure:
        res = validate.stored(out)
        if a.json:
            print(json.dumps({k: v for k, v in res.items()}, indent=1, default=str))
            return 0
        print(f"{'family':18s} {'configs':>7s} {'geomean':>8s} {'worst':>7s}")
        for f, r in list(res["families"].items()) + [("all", res["all"])]:
            print(f"{f:18s} {r['configs']:7d} {100 * r['geomean']:7.1f}% {100 * r['worst']:6.1f}%")
        for r in res["failed"]:
            print(f"failed: {r['id']} {r['technique']}: {r['failed']}")
        return 0
    from ..sim.models import scenario
    try:
        out = scenario(a.model, a.technique, a.workers, a.network, a.device_tflops * 1e12,
                       a.batch, a.per_node)
    except ValueError as err:
        ap.error(str(err))
    if a.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"{a.model} {a.technique} on {a.workers} ranks, {a.network}: "
          f"{1e3 * out['step_s']:.1f} ms/step (compute {1e3 * out['compute_s']:.1f}, codec "
          f"{1e3 * out['codec_s']:.1f}, exposed comm {1e3 * out['comm_s']:.1f}); "
          f"{out['speedup_fp32']:.2f}x fp32 allreduce, {out['speedup_bf16']:.2f}x bf16; "
          f"band +/-{100 * out['band']:.0f}% ({out['band_from']})")
    return 0
