"""Top-k selection speed: our exact and sampled selections vs ``torch.topk``.

Baseline: ``torch.topk(x.abs(), k, sorted=False)``. "exact" is the ``topk`` codec's selection
(:func:`lab.compress.topk.topk_indices`: sampled threshold, candidates, exact top-k among them,
full ``torch.topk`` fallback); "sampled" is ``topk_sampled``'s (no fallback, may return fewer
than k). Both take the signed tensor, as the codecs do (the baseline pays for its ``abs``;
ours compute magnitudes only where needed). The ``*_compress_ms`` columns time
the whole ``compress`` call (input checks of the base class, gathering values, int32
indices) for honesty. Times are medians over ``repeats`` after a warm-up; speedup = torch
time / our time (> 1: faster); recall = share of the true top-k set returned.
"""
from __future__ import annotations

import sys

import torch

from ..compress import make
from .made import stamp
from .table import bench_parser, median_seconds
from ..compress.topk import resolve_k, topk_indices
from ..compress.topk_sampled import sampled_topk_indices



def run(sizes=(1_000_000, 10_000_000), densities=(0.01, 0.001), repeats: int = 5,
        threads: int | None = None, seed: int = 0) -> list[dict]:
    """One row per (size, density): times in ms, speedups vs torch.topk, sampled recall."""
    if threads is not None:
        torch.set_num_threads(threads)
    rows = []
    for n in sizes:
        x = torch.randn(n, generator=torch.Generator().manual_seed(seed))
        for d in densities:
            k = resolve_k(n, d)
            gen = torch.Generator().manual_seed(seed)
            exact, sampled = make("topk", density=d), make("topk_sampled", density=d, seed=seed)
            t_torch = median_seconds(lambda: torch.topk(x.abs(), k, sorted=False), repeats)
            t_exact = median_seconds(lambda: topk_indices(x, k, gen), repeats)
            t_sampled = median_seconds(lambda: sampled_topk_indices(x, k, gen), repeats)
            c_exact = median_seconds(lambda: exact.compress(x), repeats)
            c_sampled = median_seconds(lambda: sampled.compress(x), repeats)
            truth = torch.zeros(n, dtype=torch.bool)
            truth[torch.topk(x.abs(), k, sorted=False).indices] = True
            got_e = topk_indices(x, k, gen)
            got_s = sampled_topk_indices(x, k, gen)
            rows.append(dict(
                n=n, density=d, k=k, threads=torch.get_num_threads(),
                torch_ms=1e3 * t_torch, exact_ms=1e3 * t_exact, sampled_ms=1e3 * t_sampled,
                exact_speedup=t_torch / t_exact, sampled_speedup=t_torch / t_sampled,
                exact_recall=float(truth[got_e].sum()) / k,
                sampled_recall=float(truth[got_s].sum()) / k, sampled_count=int(got_s.numel()),
                exact_compress_ms=1e3 * c_exact, sampled_compress_ms=1e3 * c_sampled))
    return stamp(rows, "none", clock={c: "wall" for c in ("torch_ms", "exact_ms", "sampled_ms",
                                                         "exact_compress_ms", "sampled_compress_ms")})


def format_table(rows: list[dict]) -> str:
    head = (f"{'n':>11} {'density':>8} {'k':>8} {'thr':>3} {'torch ms':>9} {'exact ms':>9} "
            f"{'x':>5} {'recall':>6} {'sampled ms':>10} {'x':>5} {'recall':>6} "
            f"{'compress ms (exact/sampled)':>28}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['n']:>11,} {r['density']:>8g} {r['k']:>8,} {r['threads']:>3} "
                     f"{r['torch_ms']:>9.2f} {r['exact_ms']:>9.2f} {r['exact_speedup']:>5.2f} "
                     f"{r['exact_recall']:>6.3f} {r['sampled_ms']:>10.2f} "
                     f"{r['sampled_speedup']:>5.2f} {r['sampled_recall']:>6.3f} "
                     f"{r['exact_compress_ms']:>13.2f} / {r['sampled_compress_ms']:<12.2f}")
    return "\n".join(lines)


def main(argv=None) -> list[dict]:
    ap = bench_parser("topk", __doc__)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000],
                    help="entries per tensor (default: 1M 10M)")
    ap.add_argument("--densities", type=float, nargs="+", default=[0.01, 0.001],
                    help="fractions of entries kept (default: 0.01 0.001)")
    ap.add_argument("--repeats", type=int, default=5, help="timed calls, their median reported")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (default: leave as is)")
    args = ap.parse_args([] if argv is None else argv)  # never read the caller's sys.argv
    rows = run(args.sizes, args.densities, args.repeats, args.threads)
    print(format_table(rows))
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
