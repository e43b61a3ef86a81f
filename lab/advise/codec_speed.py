"""Codec time of a model given by its parameter count: measured per value, one process at a time.

``advise(params=..., compute_ms=...)`` prices a model that is not run here. Its traffic scales
with its size exactly (bytes are per value), but its codec time must not be read off a profile
of ``workers`` ranks on this machine: with 16 ranks on 2 cores that profile is mostly the ranks
waiting for each other, and multiplied by ``params`` over the small model's size (651 times
for 25 million parameters and the MLP) it priced fp32, which has no codec, at 1.7 s a step.

Here each method's exchange is timed alone, in this one process, on a gradient this machine
holds: ``min(params, VALUES)`` values (fewer if memory is short, or for many ranks), laid out
as ``--model``'s layers scaled up (so that PowerSGD and the other layer-wise codecs see
matrices, not a vector). The method's own aggregator runs as rank 0 of ``workers``
(:class:`Replay`): every collective returns at once, as if each other rank had sent what this
one did, so the work a rank does per step is all there (an allgather's ``workers``
payloads decoded, not one) and no waiting is. What fp32's dense exchange costs on the same
gradient (a copy and a division) is subtracted: a codec's time is what it adds, and fp32 and
every method without a codec (P3, local SGD, the parameter server) have none. Seconds per value
times ``params`` is the codec time per step; the per-value figure is measured once per machine
and cached beside the profiles.

The parameter server's own work per gradient (sum, check, copy into the gradients, SGD with
momentum, the reply's flattening: ``lab.sync.server.Server.apply`` and its reply) is
timed the same way, per value.
"""
from __future__ import annotations

import json
import math
import os
import time

import torch

from ..comm import Collective
from .methods import Method, base_config
from .profile import _digest, _machine, cache_dir, say, write_cache

#: The most values a gradient is measured at (8 MB of fp32): past the caches, so per-value
#: throughput is a memory-bound rate that holds for bigger models.
VALUES = 1 << 21
#: The fewest (a model smaller than this is measured at its own size).
FEWEST = 1 << 16
#: Values decoded per measured step at most (an allgather decodes ``workers`` payloads):
#: many ranks are measured on a smaller gradient.
DECODED = 1 << 25
#: Timed steps per method; the fastest counts (on a shared machine the others carry other
#: processes' work, not the codec's).
REPEATS = 5


def has_codec(method: Method) -> bool:
    """Whether ``method`` compresses its gradient (a compressor, or an aggregator of its own
    other than dense allreduce)."""
    o = method.overrides
    return o.get("compressor", "none") != "none" or o.get("aggregator", "auto") not in (
        "auto", "allreduce")


def sample_values(params: int, world: int) -> int:
    """How many values to measure at for a model of ``params`` on ``world`` ranks: ``params``
    if this machine holds it comfortably, else :data:`VALUES` (fewer for many ranks, or when
    memory is short; never below :data:`FEWEST` unless the model is smaller)."""
    n = min(int(params), VALUES, max(FEWEST, DECODED // max(world, 1)))
    try:   # each rank's payload arrives once per rank; a few gradient-sized temporaries
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        n = min(n, max(FEWEST, free // (4 * (world + 16) * 4)))
    except (ValueError, OSError, AttributeError):
        pass
    return max(1, min(int(params), n))


class Replay(Collective):
    """``world`` ranks in this one process, for timing what rank 0 computes: every collective
    returns at once, as if each other rank had sent what this one did (an allgather returns
    ``world`` copies of this rank's part; an allreduce, a broadcast, a receive leave their
    tensor as it is). Each call is in the ledger, as a world of one records it (no bytes, no
    time): only the codec's work is timed."""

    def __init__(self, world: int):
        super().__init__()
        self.world_size, self.rank = world, 0

    def _run(self, op, tag, nbytes=0, fn=None, model_bytes=None, sync=None, recv=None):
        self.ledger.add(op, tag, 0, 0.0)

    def allreduce(self, t, op="sum", tag=""):
        self._run("allreduce", tag)
        return t

    def allreduce_async(self, t, op="sum", tag="", then=None):
        self._run("allreduce", tag)
        fut: torch.futures.Future = torch.futures.Future()
        fut.set_result(then(t) if then else t)
        return fut

    def broadcast(self, t, src=0, tag=""):
        self._run("broadcast", tag)
        return t

    def allgather(self, t, tag="", same_size=False):
        self._run("allgather", tag)
        return [t.clone() for _ in range(self.world_size)]

    def allgather_payload(self, payload, tag="", same_size=False):
        self._run("allgather", tag)
        return [tuple(p.clone() for p in payload) for _ in range(self.world_size)]

    def reduce_scatter(self, t, tag=""):
        self._run("reduce_scatter", tag)
        return torch.tensor_split(t, self.world_size)[0].clone()

    def alltoall(self, chunks, tag=""):
        self._run("alltoall", tag)
        return [chunks[0].clone() for _ in range(self.world_size)]

    def send(self, t, dst, tag=""):
        self._run("send", tag)

    def recv(self, t, src, tag=""):
        self._run("recv", tag)
        return t

    def recv_any(self, t, tag=""):
        self._run("recv", tag)
        return 1 % self.world_size

    def sendrecv(self, send_t, dst, recv_t, src, tag=""):
        self._run("send", tag)
        return recv_t

    def barrier(self, tag=""):
        self._run("barrier", tag)


def layer_shapes(shapes: list[tuple], n: int) -> list[tuple]:
    """``shapes`` (a model's parameters) scaled to about ``n`` values in all: each matrix's
    two sides by the square root of the factor, a vector by the factor."""
    total = sum(math.prod(s) for s in shapes)
    f = n / total
    out = []
    for s in shapes:
        if len(s) >= 2:
            r = math.sqrt(f)
            out.append((max(1, round(s[0] * r)), max(1, round(math.prod(s[1:]) * r))))
        else:
            out.append((max(1, round(math.prod(s) * f)),))
    return out


class _Exchange:
    """One method's aggregator as rank 0 of ``world`` (:class:`Replay`) on gradients of
    ``shapes``; :meth:`step` times one step (its local message, then the exchange)."""

    def __init__(self, cfg, world: int, shapes: list[tuple]):
        from ..run.build import build
        torch.manual_seed(0)
        _, _, _, _, self.agg = build(cfg, Replay(world), torch.device("cpu"))
        self.grads = [torch.randn(s) for s in shapes]
        self.step_no = 0
        self.warm = max([v for k, v in {**cfg.aggregator_kw, **cfg.compressor_kw}.items()
                         if k == "warmup_steps"] or [0]) + 1
        self.times: list[float] = []

    def step(self) -> None:
        g = [x.clone() for x in self.grads]
        t0 = time.perf_counter()
        self.agg.aggregate(self.agg.local(g, self.step_no), self.step_no)
        if self.step_no >= self.warm:
            self.times.append(time.perf_counter() - t0)
        self.step_no += 1


def _codec_seconds(cfg, dense_cfg, world: int, shapes: list[tuple], repeats: int) -> float:
    """Seconds per step that ``cfg``'s exchange adds to fp32's (``dense_cfg``) on gradients
    of ``shapes`` as rank 0 of ``world``: both warmed up, then timed in turn ``repeats`` times
    each (so that a burst of other work on a shared machine meets both), the fastest of each."""
    runs = [_Exchange(dense_cfg, world, shapes), _Exchange(cfg, world, shapes)]
    for run in runs:
        while run.step_no < run.warm:
            run.step()
    for _ in range(repeats):
        for run in runs:
            run.step()
    return min(runs[1].times) - min(runs[0].times)


def _server_seconds(n: int, repeats: int) -> float:
    """Seconds of a parameter server's work on one gradient of ``n`` values (the fastest of
    ``repeats``)."""
    p = torch.zeros(n, requires_grad=True)
    p.grad = torch.zeros(n)
    opt = torch.optim.SGD([p], lr=0.01, momentum=0.9)
    g = torch.randn(n)
    times = []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        total = torch.stack([g]).sum(0) * 0.5
        bool(torch.isfinite(total).all())
        p.grad.copy_(total)
        opt.step()
        torch.cat([p.detach().reshape(-1)])   # the reply: the parameters, flattened
        times.append(time.perf_counter() - t0)
    return min(times[1:])


def _key(parts) -> str:
    return "|".join(str(x) for x in parts)


def per_value(methods: list[Method], model: str, world: int, params: int,
              use_cache: bool = True, repeats: int = REPEATS, progress: bool = False
              ) -> tuple[dict, float, int]:
    """(``{method: codec seconds per value}``, the parameter server's seconds per value of one
    gradient, the values measured at), for a model of ``params`` values on ``world`` ranks,
    with ``model``'s layer shapes (see the module doc). Methods without a codec get 0.
    ``progress``: one line on stderr before the codecs not cached are timed, one per codec."""
    from ..data import load
    from ..models import make
    n = sample_values(params, world)
    base = base_config(model)
    net = make(base.model, load(base.data, seed=base.seed, **base.data_kw), seed=base.seed,
               **base.model_kw)
    shapes = layer_shapes([tuple(p.shape) for p in net.parameters()], n)
    values = sum(math.prod(s) for s in shapes)
    path = cache_dir() / f"{_machine()}-codec-speed-v2.json"
    cached = json.loads(path.read_text()) if use_cache and path.exists() else {}
    torch_threads = torch.get_num_threads()
    torch.set_num_threads(1)   # one process at a time, one core: as a rank computes
    try:
        out, fresh = {}, {}
        keys = {m.name: _key((m.name, _digest(m.config(base)), model, world, values))
                for m in methods if has_codec(m)}
        todo = [m for m in methods if m.name in keys and keys[m.name] not in cached]
        if progress and todo:
            from ..bench.table import machine
            say(f"timing {len(todo)} codecs on a gradient of {values:,} values as rank 0 of "
                f"{world}, one process on one core of this machine ({machine()}); "
                f"cached in {path}")
        for m in methods:
            if m.name not in keys:
                out[m.name] = 0.0
                continue
            key = keys[m.name]
            if key not in cached:
                t0 = time.perf_counter()
                fresh[key] = _codec_seconds(m.config(base), base, world, shapes, repeats) / values
                if progress:
                    say(f"  timed {todo.index(m) + 1}/{len(todo)} {m.name}: "
                        f"{1e9 * max(0.0, fresh[key]):.1f} ns a value "
                        f"({time.perf_counter() - t0:.1f} s)")
            out[m.name] = max(0.0, {**cached, **fresh}[key])
        server = _key(("server", values))
        if server not in cached:
            fresh[server] = _server_seconds(values, repeats) / values
    finally:
        torch.set_num_threads(torch_threads)
    if fresh and use_cache:
        write_cache(path, {**cached, **fresh})
    return out, {**cached, **fresh}[server], values
