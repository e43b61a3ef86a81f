"""A technique's bytes per step (what the ledger books) and its codec compute per value.

Bytes are the payload the codec itself produces: the flat gradient of the model's size is
compressed once by the library's own codec and its payload counted by
:func:`lab.compress.wire_bytes`, the function the ledger books with (Part 1.3). Nothing is
re-derived, except where an aggregator owns its rounds: PowerSGD (Vogels et al., NeurIPS 2019,
Algorithm 1) allreduces ``P`` (``n x r``) and ``Q`` (``m x r``) in fp32 for every matrix and the
other layers dense; local SGD (Lin et al., ICLR 2020) one dense allreduce every ``period``
steps. Codec compute is seconds per value measured on this CPU (:mod:`lab.advise.codec_speed`,
``bench codecs``' method) or given (``codec_s_per_value``).
"""
from __future__ import annotations

import functools
import math

#: technique -> how it exchanges: compressor (+kw), op, or an aggregator of its own
TECHNIQUES = {
    "fp32": dict(op="allreduce"),
    "bf16": dict(compressor="bf16", op="allreduce"),
    "fp16": dict(compressor="fp16", op="allreduce"),
    "qsgd": dict(compressor="qsgd", kw={"s": 15}, op="allgather"),
    "terngrad": dict(compressor="terngrad", op="allgather"),
    "topk+ef": dict(compressor="topk", kw={"density": 0.01}, op="allgather"),
    "dgc": dict(compressor="dgc", kw={"density": 0.001, "warmup": False}, op="allgather"),
    "powersgd": dict(aggregator="powersgd", rank=2),
    "local-sgd": dict(op="allreduce", period=8),
    "fifo": dict(op="allreduce", schedule="fifo"),
    "p3": dict(op="allreduce", schedule="p3"),
    "async-ps": dict(op="ps"),
    "signsgd": dict(compressor="sign", op="allgather"),
}
# the densities and ranks of Agarwal et al.'s grid (MLSys 2022), by name
TECHNIQUES.update({f"topk-{d:g}": dict(compressor="topk", kw={"density": d}, op="allgather")
                   for d in (0.1, 0.01, 0.001)})
TECHNIQUES.update({f"powersgd-{r}": dict(aggregator="powersgd", rank=r) for r in (4, 8, 16)})


def technique(name: str) -> dict:
    if name not in TECHNIQUES:
        raise ValueError(f"technique must be one of {', '.join(TECHNIQUES)}, got {name!r}")
    return TECHNIQUES[name]


@functools.lru_cache(maxsize=256)
def payload_bytes(compressor: str, n: int, kw: tuple = ()) -> int:
    """Bytes of the payload ``compressor`` makes of ``n`` fp32 values (a seeded normal gradient:
    only data-dependent codecs such as threshold vary with it; these do not)."""
    import torch
    from ..compress import make, wire_bytes
    c = make(compressor, **dict(kw))
    g = torch.randn(n, generator=torch.Generator().manual_seed(0))
    payload, _ = c.compress(g)
    return int(wire_bytes(payload))


def allreducible(compressor: str, kw: tuple = ()) -> bool:
    from ..compress import make
    return bool(make(compressor, **dict(kw)).allreduce_compatible)


def powersgd_bytes(shapes, rank: int) -> tuple[float, float]:
    """(factor bytes, dense bytes) per step of PowerSGD: ``4 r (n + m)`` per matrix (``P`` and
    ``Q``, two allreduces), the 1-D layers allreduced in fp32."""
    factors = dense = 0.0
    for s in shapes:
        if len(s) >= 2:
            n, m = s[0], math.prod(s[1:])
            factors += 4 * min(rank, n, m) * (n + m)
        else:
            dense += 4 * math.prod(s)
    return factors, dense


def traffic(name: str, shapes) -> list[tuple[str, float, float]]:
    """``[(op, calls per step, bytes per call)]`` of technique ``name`` on layers ``shapes``."""
    t = technique(name)
    n = sum(math.prod(s) for s in shapes)
    if t.get("aggregator") == "powersgd":
        f, d = powersgd_bytes(shapes, t["rank"])
        out = [("allreduce", 2.0, f / 2)]   # P then Q: about half the factor bytes each
        return out + ([("allreduce", 1.0, d)] if d else [])
    if t["op"] == "ps":
        return [("ps", 1.0, 4.0 * n)]
    if "compressor" in t:
        kw = tuple(sorted(t.get("kw", {}).items()))
        b = payload_bytes(t["compressor"], n, kw)
        op = "allreduce" if allreducible(t["compressor"], kw) else "allgather"
        return [(op, 1.0, float(b))]
    return [("allreduce", 1.0 / t.get("period", 1), 4.0 * n)]
