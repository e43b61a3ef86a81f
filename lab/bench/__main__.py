"""``python -m lab bench [launch|collectives|codecs|topk|all]``"""
from __future__ import annotations

import argparse
import sys

from .table import print_rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab bench")
    p.add_argument("what", nargs="?", default="all",
                   choices=["launch", "collectives", "codecs", "topk", "all"])
    p.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    a = p.parse_args(argv)
    want = lambda w: a.what in (w, "all")  # noqa: E731
    if want("launch"):
        from .launch import run
        print_rows(run(repeats=2 if a.quick else 3), "launch time, 4 ranks")
    if want("collectives"):
        from .collectives import bookkeeping_us, fit, overhead
        print(f"\nlab.comm bookkeeping per call (timing + ledger record): {bookkeeping_us():.2f} us")
        print_rows(overhead(iters=50 if a.quick else 200), "lab.comm allreduce vs raw torch.distributed (2 ranks)")
        ab, rows = fit(repeats=3 if a.quick else 5)
        print_rows(rows, "collective sweep (gloo, loopback)")
        print(f"\nfitted alpha = {ab.alpha * 1e6:.1f} us, beta = {ab.beta * 1e9:.3f} ns/B "
              f"(bandwidth {ab.bandwidth / 1e9:.2f} GB/s)")
    if want("codecs"):
        from .codecs import run
        sizes = (2 ** 16, 2 ** 20) if a.quick else (2 ** 16, 2 ** 20, 2 ** 22)
        print_rows(run(sizes=sizes), "codec throughput (compress + decompress, 1 thread)")
    if want("topk"):
        try:
            from .topk import main as topk_main
        except ImportError:
            print("topk benchmark not available")
        else:
            topk_main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
