"""A synchronous parameter-server step, layer by layer: MXNet's KVStore against P3.

The model of Jayarajan et al. (SysML 2019, Sec. 3-4) and of the authors' code as read in
``anandj91/p3`` (``src/kvstore/kvstore_dist.h``, its ``baseline`` branch and ps-lite):

- backward produces layer ``l``'s gradient at ``ready[l]``; each worker pushes it at once,
  the server replies with the updated values once every worker's push of that key is in, and
  layer ``l`` of the next forward starts when its reply is back (MXNet's dependency engine);
- ``kvstore`` pushes whole keys in the order backward produces them (keys of 1,000,000
  values or more are split evenly across the servers, which on one NIC is still one stretch
  of bytes); ``p3`` cuts every key into slices of 40,000 values and sends the ready slice of
  the layer the next forward needs first; ``sliced`` (slicing alone) and ``priority`` (whole
  keys by priority) are the paper's ablations;
- a message is never preempted once on the wire; its cost is ``alpha + bytes / bandwidth``;
- ``colocated`` (the authors' ``tools/launch.py``: ``N`` servers on the ``N`` worker
  machines): one NIC per machine carries its worker's pushes and its server's replies, each
  ``(N - 1) / N`` of a message, served from one queue; separate servers: a worker's uplink
  carries its pushes, its downlink the replies (served as they are ready), at full size.

Every worker is alike, so one worker's NIC is simulated; the link is empty when backward
starts (the last reply of a step precedes the next forward's last layer), so one step is
simulated from backward's start to the end of the next forward: that is the step time.
"""
from __future__ import annotations

import heapq
import math

SCHEMES = ("kvstore", "p3", "sliced", "priority")
SLICE, BIG_ARRAY = 40_000, 1_000_000


def _units(sizes, scheme: str, slice_values: int):
    """(layer, values) of each message a worker pushes, per layer."""
    out = []
    for layer, n in enumerate(sizes):
        if scheme in ("p3", "sliced"):
            out += [(layer, min(slice_values, n - a)) for a in range(0, n, slice_values)]
        else:
            out.append((layer, n))
    return out


def _key(scheme: str, layer: int, released: float, seq: int):
    """The queue's order: forward-order priority for p3 and priority, arrival otherwise."""
    return (layer, released, seq) if scheme in ("p3", "priority") else (released, seq)


def _simulate(units, ready, scheme, cost, shared: bool) -> list[float]:
    """Time each layer's last reply arrives; ``cost(values)`` is one message's seconds."""
    n_layers = len(ready)
    arrivals = [(ready[layer], i, layer, v, "push") for i, (layer, v) in enumerate(units)]
    heapq.heapify(arrivals)
    pipes = ["one"] if shared else ["push", "reply"]
    free = {p: 0.0 for p in pipes}
    queue = {p: [] for p in pipes}
    avail = [0.0] * n_layers
    done = []   # (finish time, seq, layer, values, kind): what is on the wire
    seq, now = len(units), 0.0
    while True:
        for p in pipes:                      # an idle NIC starts its best queued message
            if queue[p] and free[p] <= now:
                _, _, s, layer, v, kind = heapq.heappop(queue[p])
                free[p] = now + cost(v)
                heapq.heappush(done, (free[p], s, layer, v, kind))
        now = min(arrivals[0][0] if arrivals else math.inf, done[0][0] if done else math.inf)
        if now == math.inf:
            break
        while done and done[0][0] <= now:
            t, s, layer, v, kind = heapq.heappop(done)
            if kind == "push":               # every worker's push is in: the server replies
                heapq.heappush(arrivals, (t, seq, layer, v, "reply"))
                seq += 1
            else:
                avail[layer] = max(avail[layer], t)
        while arrivals and arrivals[0][0] <= now:
            t, s, layer, v, kind = heapq.heappop(arrivals)
            p = "one" if shared else kind
            heapq.heappush(queue[p], (_key(scheme, layer, t, s), t, s, layer, v, kind))
    return avail


def step(sizes, forward_s, backward_s, scheme: str, bandwidth: float, workers: int,
         alpha: float = 0.0, colocated: bool = True, bytes_per_value: float = 4.0,
         slice_values: int = SLICE) -> float:
    """Seconds per step of ``scheme`` for layers of ``sizes`` values (forward order) with
    per-layer ``forward_s`` and ``backward_s``, ``workers`` machines on NICs of ``bandwidth``
    bytes/s (see the module doc)."""
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {', '.join(SCHEMES)}, got {scheme!r}")
    if not len(sizes) == len(forward_s) == len(backward_s) or not sizes:
        raise ValueError("sizes, forward_s and backward_s must be equal-length, non-empty lists")
    if not (bandwidth > 0) or math.isinf(bandwidth):
        raise ValueError(f"bandwidth must be a finite number > 0 bytes/s, got {bandwidth!r}")
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an int >= 1, got {workers!r}")
    if workers == 1 and colocated:
        return float(sum(forward_s) + sum(backward_s))
    share = (workers - 1) / workers if colocated else 1.0
    cost = lambda v: alpha + share * v * bytes_per_value / bandwidth  # noqa: E731
    ready, t = [0.0] * len(sizes), 0.0
    for i in reversed(range(len(sizes))):
        t += backward_s[i]
        ready[i] = t
    avail = _simulate(_units(sizes, scheme, slice_values), ready, scheme, cost, colocated)
    t = ready[0]                       # the next forward, layer by layer
    for i, f in enumerate(forward_s):
        t = max(t, avail[i]) + f
    return t


def profile(name: str, batch: int, device_flops: float):
    """(sizes, forward_s, backward_s) of a model of :mod:`lab.sim.models`: each layer's
    forward FLOPs times ``batch`` over ``device_flops``, backward twice the forward."""
    from .models import layers
    if not device_flops > 0:
        raise ValueError(f"device_flops must be > 0, got {device_flops!r}")
    ls = layers(name)
    sizes = [math.prod(s) for s, _ in ls]
    fwd = [f * batch / device_flops for _, f in ls]
    return sizes, fwd, [2 * f for f in fwd]


def speedup_curve(name: str, links_bps, workers: int = 4, batch: int = 32,
                  device_flops: float = 10e12, colocated: bool = True, scheme: str = "p3",
                  alpha: float = 0.0) -> list[dict]:
    """kvstore's step over ``scheme``'s at each link speed (bits/s) in ``links_bps``."""
    sizes, fwd, bwd = profile(name, batch, device_flops)
    out = []
    for bps in map(float, links_bps):
        kv = step(sizes, fwd, bwd, "kvstore", bps / 8, workers, alpha, colocated)
        me = step(sizes, fwd, bwd, scheme, bps / 8, workers, alpha, colocated)
        out.append({"model": name, "link_gbps": bps / 1e9, "kvstore_s": kv, f"{scheme}_s": me,
                    "speedup": kv / me})
    return out
