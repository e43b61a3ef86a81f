"""Codec throughput: GB/s of gradient through compress + decompress, vs a plain memory copy.

``python -m lab bench codecs [--device cpu|cuda] [--sizes N ...] [--codecs NAME ...] [--quick]
[--json] [--checks] [--small] [--grace [DIR]]``. Each row: the best of ``repeats`` round trips (compress,
then decompress) of an fp32 tensor of ``elements`` values on ``device``, and the best compress
and decompress times alone; ``GB/s`` is input bytes per second; ``x memcpy time`` is the round
trip's time over the time of ``tensor.clone()`` on the same device (1.0 = as fast as a copy).
On the CPU the default is one thread (the issue's measure); on a GPU every call is
synchronised before the clock stops. ``ratio`` is the compression ratio (dense bytes / wire
bytes), from the payload itself. :func:`run` tunes glibc's allocator as the training ranks do
(:mod:`lab.runtime.allocator`; ``LAB_KEEP_FREED_MEMORY=0`` measures with its defaults).
On the CPU, the cast, sign, 1-bit, QSGD and TernGrad codecs run their C kernels
(:mod:`lab.compress.native`), and every codec training uses does a whole compress or decompress
of a contiguous float32 tensor in one or two fused C calls (:mod:`lab.compress.native_small`);
``LAB_NATIVE=0`` measures the torch reference instead.

``--checks``: the cost of checking a payload against its declared wire format
(:mod:`lab.compress.wire`) beside the decode it guards (best of many calls each), as a percentage.
``--small``: the CPU time of one compress and one decompress at 1000 and 2^16 values for the
codecs training uses (:func:`small_overhead`): their fixed cost per call.
``--grace``: fp16 and Random-k against GRACE (Xu et al., ICDCS 2021; ``sands-lab/grace``,
``grace_dl/torch/compressor/fp16.py`` and ``randomk.py``) in the same harness: imported from a
checkout of that repository given as DIR, else its operations re-implemented here (a cast and a
cast back; a seed from the tensor's name and step, ``randperm(n)[:k]``, a gather and a scatter
into zeros).
"""
from __future__ import annotations

import contextlib
import json
import sys
import time

import torch

from .. import compress
from ..runtime.allocator import keep_freed_memory
from .made import stamp
from .table import bench_parser, print_rows

DEFAULT = ("none", "fp16", "bf16", "sign", "scaled_sign", "efsgd", "onebit", "qsgd",
           "terngrad", "zipml", "randomk", "randomk_private", "topk", "topk_sampled", "wangni",
           "dgc", "adacomp", "threshold", "gradient_dropping", "qsgd_elias")


def _best(fn, repeats: int, sync) -> float:
    fn()  # warm-up (allocator, lazy init, first touch)
    sync()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t0)
    return best


@contextlib.contextmanager
def measuring(threads: int):
    """For the duration: ``threads`` torch threads (0: leave as is) and glibc's allocator tuned
    as the training ranks run it (:mod:`lab.runtime.allocator`)."""
    keep_freed_memory()
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def run(names=None, sizes=(2 ** 16, 2 ** 20, 2 ** 22), repeats: int = 3, threads: int = 1,
        device: str = "cpu", split: bool = False) -> list[dict]:
    """Throughput rows (module docstring) for codecs ``names`` at each size; ``split`` also
    times compress and decompress alone (``compress ms``, ``decode ms``)."""
    dev = torch.device(device)
    with measuring(threads if dev.type == "cpu" else 0):
        known = compress.names()
        names = names or [n for n in DEFAULT if n in known]
        for n in names:
            if n not in known:
                raise ValueError(f"codecs: unknown codec {n!r}; known: {', '.join(known)}")
        return _run(names, sizes, repeats, dev, split)


def _run(names, sizes, repeats, dev, split) -> list[dict]:
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
    rows = []
    for n in sizes:
        g = torch.randn(n, generator=torch.Generator().manual_seed(0)).to(dev)
        copy = _best(lambda: g.clone(), repeats, sync)
        for name in names:
            c = compress.make(name)

            def roundtrip():
                payload, ctx = c.compress(g, key="bench")
                c.decompress(payload, ctx)
            t = _best(roundtrip, repeats, sync)
            payload, ctx = c.compress(g, key="bench")
            row = {"codec": name, "device": dev.type, "elements": n, "ms": 1e3 * t}
            if split:
                row["compress ms"] = 1e3 * _best(lambda: c.compress(g, key="bench"), repeats, sync)
                row["decode ms"] = 1e3 * _best(lambda: c.decompress(payload, ctx), repeats, sync)
            rows.append({**row, "GB/s": n * 4 / t / 1e9, "x memcpy time": t / copy,
                         "ratio": n * 4 / max(1, compress.wire_bytes(payload))})
    return stamp(rows, "none", clock={c: "wall" for c in ("ms", "compress ms", "decode ms", "GB/s")},
                 bytes={"ratio": "handed over"})


#: targets against a device-to-device copy of the same tensor (the GPU issue): a cast's round
#: trip within 1.5x a copy, a quantizer's within 5x, Top-k's compress no slower than
#: ``torch.topk`` of the magnitudes at the same k
CASTS = ("fp16", "bf16")
QUANTIZERS = ("sign", "scaled_sign", "efsgd", "onebit", "qsgd", "terngrad", "zipml", "qsgd_elias")
TARGETS = {**{c: 1.5 for c in CASTS}, **{c: 5.0 for c in QUANTIZERS}}


def against_copy(names=None, sizes=(2 ** 20, 2 ** 24, 2 ** 26), device: str = "cuda",
                 repeats: int = 3, slow_s: float = 1.0):
    """Yield one row per size and codec as soon as it is measured: the round trip, compress and
    decompress times (best of ``repeats``), the round trip over a ``clone()`` of the same tensor
    (``x copy``), and where the codec has a target (:data:`TARGETS`; ``topk``: its compress over
    ``torch.topk(x.abs(), k)``) the target and whether it is met. A codec whose first round trip
    takes over ``slow_s`` seconds is timed once, and not at the larger sizes (``skipped``)."""
    dev = torch.device(device)
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
    known = compress.names()
    names = names or [n for n in DEFAULT if n in known]
    slow: dict[str, str] = {}
    for n in sizes:
        g = torch.randn(n, generator=torch.Generator().manual_seed(0)).to(dev)
        copy = _best(lambda: g.clone(), repeats, sync)
        for name in names:
            row = {"codec": name, "device": dev.type, "elements": n, "copy ms": 1e3 * copy}
            if name in slow:
                yield {**row, "skipped": slow[name]}
                continue
            c = compress.make(name)

            def roundtrip():
                c.decompress(*c.compress(g, key="bench"))
            t0 = time.perf_counter()
            roundtrip()
            sync()
            first = time.perf_counter() - t0
            if first > slow_s:
                slow[name] = f"a round trip of {n} values took {first:.2f} s"
                t = first
            else:
                t = _best(roundtrip, repeats, sync)
                payload, ctx = c.compress(g, key="bench")
                row["compress ms"] = 1e3 * _best(lambda: c.compress(g, key="bench"), repeats, sync)
                row["decode ms"] = 1e3 * _best(lambda: c.decompress(payload, ctx), repeats, sync)
            row.update({"ms": 1e3 * t, "x copy": t / copy})
            if name in TARGETS:
                row.update({"target": f"<= {TARGETS[name]}x copy", "ok": t / copy <= TARGETS[name]})
            elif name == "topk" and "compress ms" in row:
                k = c.density if hasattr(c, "density") else 0.01
                k = max(1, int(k * n + 0.5))
                ref = _best(lambda: torch.topk(g.abs(), k, sorted=False), repeats, sync)
                row.update({"torch.topk ms": 1e3 * ref,
                            "x torch.topk": row["compress ms"] / (1e3 * ref),
                            "target": "compress <= torch.topk", "ok": row["compress ms"] <= 1e3 * ref})
            yield stamp([row], "none", clock={c: "wall" for c in (
                "copy ms", "compress ms", "decode ms", "ms", "torch.topk ms")})[0]


def _cpu_best(fn, repeats: int, number: int) -> float:
    """Best over ``repeats`` of the CPU time of this thread per call, over ``number`` calls:
    time a descheduled thread does not run is not counted (a loaded machine's noise)."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.thread_time()
        for _ in range(number):
            fn()
        best = min(best, (time.thread_time() - t0) / number)
    return best


def _encoded(names, default, sizes):
    """``(n, g, name, codec, payload, ctx)`` for each size and codec (``names``, else those of
    ``default`` that are registered): a fixed random ``g`` of ``n`` values and one payload."""
    for n in sizes:
        g = torch.randn(n, generator=torch.Generator().manual_seed(0))
        for name in names or [m for m in default if m in compress.names()]:
            c = compress.make(name)
            yield (n, g, name, c, *c.compress(g, key="bench"))


def check_overhead(names=None, sizes=(2 ** 20,), repeats: int = 7, threads: int = 1) -> list[dict]:
    """Per codec and size: the decode time (``decompress``, checks included), the time of the
    check ``decompress`` runs before decoding (``check us``) and its share of the decode, and
    the full check alone (``check_payload``: every range, also those a decoder tests in its
    own pass, :attr:`~lab.compress.base.Compressor.decode_checks`) and its share, on the CPU.
    All are this thread's CPU time, best of ``repeats`` batches (enough calls for 20 ms a
    decode batch, 1000 calls a check batch). A range fused into a decoder's pass (the sparse
    codecs' C scatter: one compare per index it writes) is inside ``decode ms``, not in
    ``check us``."""
    with measuring(threads):
        rows = []
        for n, g, name, c, payload, ctx in _encoded(names, DEFAULT, sizes):
            once = _best(lambda: c.decompress(payload, ctx), 1, lambda: None)
            number = max(1, min(1000, int(0.02 / max(once, 1e-6))))
            dec = _cpu_best(lambda: c.decompress(payload, ctx), repeats, number)
            codec = getattr(c, "inner", c)  # error feedback decodes with its inner codec
            shape, dtype, inner = ctx
            chk = _cpu_best(lambda: codec.wire.check(codec, payload, shape.numel(), dtype,
                                                     inner, codec.decode_checks), repeats, 1000)
            full = _cpu_best(lambda: c.check_payload(payload, ctx), repeats, 1000)
            rows.append({"codec": name, "elements": n, "decode ms": 1e3 * dec,
                         "check us": 1e6 * chk, "check % of decode": 100 * chk / dec,
                         "full check us": 1e6 * full,
                         "full check % of decode": 100 * full / dec})
        return stamp(rows, "none", clock={"decode ms": "cpu", "check us": "cpu", "full check us": "cpu"})


#: the codecs training uses, and the casts they are measured against (issue 31 item 4:
#: small-tensor overhead below 10 us a call)
TRAINING = ("none", "fp16", "bf16", "sign", "scaled_sign", "efsgd", "onebit", "qsgd", "terngrad",
            "topk", "randomk", "dgc", "threshold")


def small_overhead(names=None, sizes=(1000, 2 ** 16), repeats: int = 7, threads: int = 1,
                   number: int = 200) -> list[dict]:
    """Per codec and size: the CPU time of one ``compress`` and of one ``decompress`` (checks
    included) in microseconds, best of ``repeats`` batches of ``number`` calls (this thread's
    CPU time: a descheduled thread is not counted). On a small tensor this is the codec's
    fixed cost (Python, torch dispatch, ctypes), which a model of many small layers pays per
    layer and step. Its floor is the number of torch ops (an allocation is one) and C calls a
    codec makes, ~2-4 us each on one core among other ops (~1.5 us each in a loop of one):
    each codec's small-tensor path (:mod:`lab.compress.native_small`) does its arithmetic,
    checks, random draws and packing in one or two C calls, so a payload of one or two parts
    costs about 5-12 us each way. Above that stay the codecs whose bits come from torch ops
    kept on purpose: QSGD (torch's ``vector_norm`` per bucket, three payload parts, a
    generator draw) and TernGrad (torch's sums and float32 square root for sigma, a generator
    draw); and DGC's per-key bookkeeping (numbers: ``python -m lab bench codecs --small``)."""
    with measuring(threads):
        rows = []
        for n, g, name, c, payload, ctx in _encoded(names, TRAINING, sizes):
            enc = _cpu_best(lambda: c.compress(g, key="bench"), repeats, number)
            dec = _cpu_best(lambda: c.decompress(payload, ctx), repeats, number)
            rows.append({"codec": name, "elements": n, "compress us": 1e6 * enc,
                         "decompress us": 1e6 * dec})
        return stamp(rows, "none", clock={"compress us": "cpu", "decompress us": "cpu"})


class _GraceFP16:
    """GRACE's ``FP16Compressor``, re-implemented: a cast, and a cast back."""

    def compress(self, tensor, name):
        return [tensor.type(torch.float16)], tensor.dtype

    def decompress(self, tensors, dtype):
        return tensors[0].type(dtype)


class _GraceRandomK:
    """GRACE's ``RandomKCompressor``, re-implemented: the global RNG seeded from the tensor's
    name and the step, ``randperm(n)[:k]`` (k = max(1, int(n * ratio))), the values sent,
    the indices kept in the ctx, and a scatter into zeros."""

    def __init__(self, compress_ratio):
        self.global_step, self.compress_ratio = 0, compress_ratio

    def compress(self, tensor, name):
        torch.manual_seed(sum(name.encode(), self.global_step))
        self.global_step += 1
        flat = tensor.flatten()
        k = max(1, int(flat.numel() * self.compress_ratio))
        idx = torch.randperm(flat.numel(), device=flat.device)[:k]
        return [flat[idx]], (idx, flat.numel(), tensor.size())

    def decompress(self, tensors, ctx):
        idx, numel, shape = ctx
        out = torch.zeros(numel, dtype=tensors[0].dtype, device=tensors[0].device)
        return out.scatter_(0, idx, tensors[0]).view(shape)


def _best_pair(a, b, repeats: int) -> tuple[float, float]:
    """The best wall time of ``a`` and of ``b``, timed in alternation (a, b, a, b...) so that
    a change of load on a shared machine hits both alike."""
    a(), b()
    best_a = best_b = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        a()
        t1 = time.perf_counter()
        b()
        t2 = time.perf_counter()
        best_a, best_b = min(best_a, t1 - t0), min(best_b, t2 - t1)
    return best_a, best_b


def grace_codecs(path: str | None = None) -> tuple[dict, str]:
    """GRACE's fp16 and Random-k (1%) as ``{our codec name: compressor}``, imported from a
    checkout at ``path`` or re-implemented; and which of the two it is."""
    if not path:
        return {"fp16": _GraceFP16(), "randomk": _GraceRandomK(0.01)}, "re-implemented"
    sys.path.insert(0, path)
    try:
        from grace_dl.torch.compressor.fp16 import FP16Compressor
        from grace_dl.torch.compressor.randomk import RandomKCompressor
    except ImportError as err:
        raise SystemExit(f"codecs: --grace {path}: cannot import grace_dl from there ({err})")
    finally:
        sys.path.remove(path)
    return {"fp16": FP16Compressor(), "randomk": RandomKCompressor(0.01)}, f"imported from {path}"


def against_grace(sizes=(2 ** 16, 2 ** 20, 2 ** 22), repeats: int = 7, path: str | None = None,
                  threads: int = 1) -> list[dict]:
    """Round-trip time of our fp16 and Random-k (1%, shared seed) against GRACE's, per size,
    in one harness on the CPU (one thread by default; the two timed in alternation, best of
    ``repeats`` each), with the copy time beside them. Our fp16 checks that every value
    survives the cast (NaN, Inf, overflow) in the cast's own pass; GRACE's checks nothing."""
    theirs, how = grace_codecs(path)
    with measuring(threads):
        rows = []
        for n in sizes:
            g = torch.randn(n, generator=torch.Generator().manual_seed(0))
            copy = _best(lambda: g.clone(), repeats, lambda: None)
            for name, other in theirs.items():
                ours = compress.make(name, **({"density": 0.01} if name == "randomk" else {}))
                t_ours, t_grace = _best_pair(
                    lambda: ours.decompress(*ours.compress(g, key="bench")),
                    lambda: other.decompress(*other.compress(g, "bench")), repeats)
                rows.append({"codec": name, "elements": n, "lab ms": 1e3 * t_ours,
                             f"grace ({how}) ms": 1e3 * t_grace, "lab / grace": t_ours / t_grace,
                             "lab x copy": t_ours / copy, "grace x copy": t_grace / copy})
        return stamp(rows, "none", clock={"lab ms": "wall", f"grace ({how}) ms": "wall"})


def main(argv=None) -> list[dict]:
    ap = bench_parser("codecs", __doc__)
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    ap.add_argument("--sizes", type=int, nargs="+", default=None,
                    help="elements per tensor (default 2^20 2^22 on cpu, 2^24 on cuda)")
    ap.add_argument("--codecs", nargs="+", default=None, help="codec names (default: the main ones)")
    ap.add_argument("--repeats", type=int, default=None,
                    help="timed calls per cell, the fastest kept (default 5; quick 3)")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads (default 1; 0: leave as is)")
    ap.add_argument("--quick", action="store_true", help="one size, fewer repeats")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    ap.add_argument("--checks", action="store_true",
                    help="also time the wire-format check against the decode (CPU)")
    ap.add_argument("--small", action="store_true",
                    help="also time one compress and one decompress per call at 1000 and 2^16 "
                         "values (--sizes overrides) for the codecs training uses and the casts (or "
                         "--codecs): the small-tensor overhead, CPU time in us")
    ap.add_argument("--grace", nargs="?", const="", default=None, metavar="DIR",
                    help="also time fp16 and Random-k against GRACE's (a checkout of "
                         "sands-lab/grace at DIR, else its operations re-implemented; CPU)")
    a = ap.parse_args([] if argv is None else argv)
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("codecs: --device cuda asked for, but no CUDA device is visible")
    sizes = a.sizes or ([2 ** 24] if a.device.startswith("cuda") else
                        [2 ** 20] if a.quick else [2 ** 20, 2 ** 22])
    repeats = a.repeats or (3 if a.quick else 5)
    rows = run(a.codecs, sizes, repeats, a.threads, a.device, split=True)
    extra = {}
    if a.checks:
        extra["wire-format check vs decode (cpu, 1 thread)"] = check_overhead(
            a.codecs, a.sizes or [2 ** 20], repeats, a.threads)
    if a.small:
        extra["small-tensor overhead per call (cpu, 1 thread, us)"] = small_overhead(
            a.codecs, a.sizes or [1000, 2 ** 16], repeats, a.threads)
    if a.grace is not None:
        extra["fp16 and Random-k (1%) against GRACE (cpu, round trip)"] = against_grace(
            a.sizes or [2 ** 16, 2 ** 20, 2 ** 22], repeats, a.grace or None, a.threads)
    if a.json:
        print(json.dumps({"throughput": rows, **extra} if extra else rows, indent=1))
    else:
        kernels = ""
        if a.device == "cpu":  # which CPU path ran: the C kernels or the torch reference
            kernels = ", C kernels" if compress.native.enabled(torch.zeros(1)) else \
                ", torch reference (LAB_NATIVE=0 or no C compiler)"
        print_rows(rows, f"codec throughput on {a.device} (compress + decompress"
                         f"{', 1 thread' if a.device == 'cpu' and a.threads == 1 else ''}"
                         f"{kernels})")
        for title, more in extra.items():
            print_rows(more, title)
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
