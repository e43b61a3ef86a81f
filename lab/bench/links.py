"""``python -m lab bench links``: the alpha-beta model against kernel links, collective by collective.

Every collective the book uses (allreduce, allgather, broadcast, reduce-scatter, send/recv) at
4 KB to 64 MB, on 2 and 4 ranks, at 100 Mb/s, 1 Gb/s and 5 Gb/s, three ways:

- **kernel**: on a kernel link (:mod:`lab.comm.kernel`: a namespace per rank, every NIC shaped
  by ``tbf`` in both directions, a bridge for a switch), the median of ``repeats`` calls, timed
  on rank 0; for a broadcast on the slowest rank and for send/recv on the receiver (a sender,
  and a broadcast's root, return once their bytes are buffered);
- **model**: the alpha-beta model's time for that call (:mod:`lab.comm.cost`);
- **emulated**: the modeled link (``link="model"``: loopback, then a sleep up to the model).

The links have no latency of their own here (latency 0: the kernel cannot delay, and the model
would add its alpha on top), so ``kernel / model`` is the bandwidth term against TCP, gloo's
algorithm and the shaper; alpha and beta are then fitted from the kernel runs of each link
(``lab.comm.cost.AlphaBeta.fit``) from the sizes of 1 MB and more: below a few times the
shaper's burst (64 KiB and up) the first bytes pass at memory speed, which no alpha-beta line
describes. Each kernel row also gives the bytes rank 0's NIC sent
and received by the kernel's own counters beside what the ledger books on the wire
(:func:`lab.comm.cost.wire_bytes`). ``--json FILE`` writes the rows with their provenance
(command, machine, date); ``--quick``: 2 ranks, 1 Gb/s, three sizes.
"""
from __future__ import annotations

import datetime
import json
import statistics
import sys
import time

import torch

from ..comm import Network
from ..comm.cost import AlphaBeta
from .made import stamp
from .table import bench_parser, machine, print_rows

OPS = ("allreduce", "allgather", "broadcast", "reduce_scatter", "send")
SIZES = (4 * 2 ** 10, 64 * 2 ** 10, 2 ** 20, 8 * 2 ** 20, 64 * 2 ** 20)
LINKS = ("100Mbps", "1Gbps", "5Gbps")
FIT_MIN = 2 ** 20  # alpha and beta are fitted from these sizes up (beyond the shaper's burst)
MAX_CALL_S = 1.5  # sizes whose modeled call takes longer are skipped (the sweep stays minutes)


def nic_counters() -> tuple[int, int]:
    """(bytes sent, bytes received) of ``eth0`` in this thread's network namespace."""
    with open("/proc/thread-self/net/dev") as f:
        for line in f:
            if line.strip().startswith("eth0:"):
                fields = line.split(":", 1)[1].split()
                return int(fields[8]), int(fields[0])
    return 0, 0


def _call(comm, op: str, t: torch.Tensor):
    if op == "allreduce":
        comm.allreduce(t)
    elif op == "allgather":
        comm.allgather(t, same_size=True)
    elif op == "broadcast":
        comm.broadcast(t, 0)
    elif op == "reduce_scatter":
        comm.reduce_scatter(t)
    elif op == "send":
        if comm.rank == 0:
            comm.send(t, 1)
        elif comm.rank == 1:
            comm.recv(t, 0)


def _sweep(ctx, plan, repeats: int, counters: bool, stat: str = "median"):
    comm, rows = ctx.comm, []
    for op, n in plan:
        t = torch.ones(n // 4)
        times = []
        for _ in range(repeats + 1):  # the first is a warm-up (connections, allocations)
            comm.barrier()
            c0, mark = nic_counters() if counters else (0, 0), comm.ledger.mark()
            t0 = time.perf_counter()
            _call(comm, op, t)
            times.append(time.perf_counter() - t0)
            recs = comm.ledger.since(mark)
            comm.barrier()  # every rank's bytes are off the wire
            c1 = nic_counters() if counters else (0, 0)
        pick = min if stat == "min" else statistics.median
        rows.append({"op": op, "bytes": n, "s": pick(times[1:]),
                     "nic sent": c1[0] - c0[0], "nic recv": c1[1] - c0[1],
                     "wire sent": sum(r.wire_sent for r in recs),
                     "wire recv": sum(r.wire_recv for r in recs)})
    return rows


def plan_for(network: Network, ranks: int, ops=OPS, sizes=SIZES) -> list[tuple[str, int]]:
    """The (op, bytes) pairs whose modeled call on ``network`` takes under ``MAX_CALL_S``."""
    return [(op, n) for op in ops for n in sizes
            if network.time("allgather" if op == "allgather" else op, n, ranks) <= MAX_CALL_S]


def run(links=LINKS, ranks=(2, 4), ops=OPS, sizes=SIZES, repeats: int = 3,
        emulated: bool = True, stat: str = "median") -> dict:
    """Rows (module docstring) and the alpha and beta fitted to each collective's kernel runs
    on each link and rank count. ``stat``: each call's time is the ``"median"`` of its repeats,
    or the fastest (``"min"``: on a busy machine, interference only adds time)."""
    if stat not in ("median", "min"):
        raise ValueError(f"stat must be 'median' or 'min', got {stat!r}")
    from ..runtime import launch
    rows, fits = [], []
    for spec in links:
        net = Network.parse(f"{spec},0ms")
        for p in ranks:
            plan = plan_for(net, p, ops, sizes)
            kern = launch(_sweep, p, plan, repeats, True, stat, network=net, link="kernel",
                          timeout=120 + 10 * len(plan) * repeats, progress=False)
            emu = launch(_sweep, p, plan, repeats, False, stat, network=net, timeout=120 + 10 *
                         len(plan) * repeats, progress=False)[0] if emulated else None
            samples: dict[str, list] = {}
            for i, (op, n) in enumerate(plan):
                # send: the receiver's time; broadcast: the last rank to have the bytes
                k = kern[1][i] if op == "send" else max((r[i] for r in kern), key=lambda x: x["s"]) \
                    if op == "broadcast" else kern[0][i]
                model = net.time(op, n, p if op != "send" else 2)
                r0 = kern[0][i]
                rows.append({"link": spec, "ranks": p, "op": op, "bytes": n,
                             "kernel ms": round(1e3 * k["s"], 3), "model ms": round(1e3 * model, 3),
                             "kernel / model": round(k["s"] / model, 3) if model else None,
                             **({"emulated ms": round(1e3 * emu[i]["s"], 3)} if emu else {}),
                             "nic sent": r0["nic sent"], "wire sent": r0["wire sent"],
                             "nic recv": r0["nic recv"], "wire recv": r0["wire recv"]})
                stamp(rows[-1:], "kernel", clock={"kernel ms": "wall", "model ms": "modeled"},
                      bytes={"bytes": "handed over", "nic sent": "nic", "nic recv": "nic",
                             "wire sent": "on the wire", "wire recv": "on the wire"})
                if n >= FIT_MIN:
                    samples.setdefault(op, []).append((op, n, p if op != "send" else 2, k["s"]))
            for op, rows_op in samples.items():  # one fit per collective: they differ
                if len(rows_op) < 2:
                    continue
                fit = AlphaBeta.fit(rows_op)
                fits.append({"link": spec, "ranks": p, "op": op, "alpha us": round(1e6 * fit.alpha, 1),
                             "fitted Mb/s": round(8e-6 * fit.bandwidth, 1),
                             "link Mb/s": round(8e-6 * net.bandwidth, 1)})
    return {"rows": rows, "fits": stamp(fits, "kernel")}


def main(argv=None) -> int:
    p = bench_parser("links", __doc__)
    p.add_argument("--quick", action="store_true", help="2 ranks, 1 Gb/s, 64 KB to 8 MB, allreduce "
                   "and allgather, 2 repeats")
    p.add_argument("--links", nargs="+", default=list(LINKS), help=f"rates (default: {' '.join(LINKS)})")
    p.add_argument("--ranks", type=int, nargs="+", default=[2, 4], help="rank counts (default: 2 4)")
    p.add_argument("--ops", nargs="+", choices=OPS, default=list(OPS), help="collectives (default: all)")
    p.add_argument("--sizes", type=int, nargs="+", default=list(SIZES),
                   help="bytes per rank (default: 4 KB 64 KB 1 MB 8 MB 64 MB)")
    p.add_argument("--repeats", type=int, default=3, help="timed calls per cell, median (default 3)")
    p.add_argument("--no-emulated", action="store_true", help="skip the modeled-link column")
    p.add_argument("--json", metavar="FILE", help="also write the rows, fits and provenance as JSON")
    a = p.parse_args(argv)
    from ..comm.kernel import unavailable
    why = unavailable()
    if why:
        print(f"bench links: kernel links are not available here ({why})", file=sys.stderr)
        return 2
    if a.repeats < 1 or min(a.ranks) < 2:
        p.error("--repeats must be >= 1 and --ranks >= 2")
    kw = dict(links=a.links, ranks=a.ranks, ops=a.ops, sizes=tuple(a.sizes), repeats=a.repeats,
              emulated=not a.no_emulated)
    if a.quick:
        kw.update(links=["1Gbps"], ranks=[2], ops=["allreduce", "allgather"],
                  sizes=(64 * 2 ** 10, 2 ** 20, 8 * 2 ** 20), repeats=2)
    out = run(**kw)
    print_rows(out["rows"], "collectives on kernel links (latency 0: bandwidth term only) vs the "
                            "alpha-beta model and the modeled link")
    print_rows(out["fits"], "alpha and beta fitted from the kernel runs, per collective")
    if a.json:
        prov = {"command": "python -m lab bench links " + " ".join(argv if argv is not None else sys.argv[1:]),
                "machine": machine(), "torch": torch.__version__,
                "date": datetime.date.today().isoformat()}
        with open(a.json, "w") as f:
            json.dump({**prov, **out}, f, indent=1)
    return 0
