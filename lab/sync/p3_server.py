"""``p3-ps``: P3 on sharded parameter servers (Jayarajan, Wei, Gibson, Fedorova, Pekhimenko,
"Priority-based Parameter Propagation for Distributed DNN Training", SysML 2019, sec. 3-4).

Ranks ``0..S-1`` are servers (``sync_kw servers=S``), the others workers. Every layer (in the
forward order of a traced pass, :func:`lab.schedule.overlap.traced_layers`) is cut into slices of
``slice_size`` values (:func:`lab.schedule.plan.make_units`); each slice has a home server
(:func:`homes`). During backward a worker queues each slice the moment its layer's gradient is
ready; one sending thread pops the queue, highest priority first (the slice's layer in forward
order, layer 0 first: a slice made late in backward overtakes queued ones, at slice
granularity) and pushes it to its home. A server sums a slice when all workers have pushed it
(synchronous, as ``bsp``), applies the optimizer to that slice alone (SGD with momentum and
Adam are elementwise, so per-slice steps give the whole-model step, bitwise) and queues the new
slice for every worker on its own sending thread, again by priority. A worker's receiving
thread writes each pulled slice into the model; its next forward waits, per layer (a forward
pre-hook), only for that layer's slices. ``priority=False`` is the sliced, sharded FIFO
baseline (MXNet's default KVStore); ``servers=1, slice_size="inf"`` (whole layers) gives the
same parameters as ``sync="bsp"``.

From the authors' code (``anandj91/p3``, read for understanding): ``src/kvstore/kvstore_dist.h``
(``EncodeDefaultKey``: a layer of at least ``MXNET_KVSTORE_BIGARRAY_BOUND`` = 40,000 values is
cut into slices placed round-robin over the servers, a smaller one goes whole to server
``key * 9973 mod S``: :func:`homes`), ``src/kvstore/kvstore_dist_server.h`` (``ApplyUpdates``:
the update runs when ``NumWorkers`` pushes are merged, then every worker is answered) and
``ps-lite/src/van.cc`` with ``ps-lite/include/ps/internal/threadsafe_queue.h`` (one sending
thread per node draining a priority queue, one receiving thread).

Our reading on ``lab.comm``: every rank has one sending and one receiving thread, each slice
one ``Collective.send/recv`` on the emulated link, so a rank's uplink and downlink each carry
one message at a time. Each link is a virtual clock (:class:`lab.comm.network.LinkClock`, as in
the allreduce engine): a message starts on the sender's uplink when it is ready and the link is
free, on the receiver's downlink no earlier (the start travels in the header; one host's
monotonic clock), and a thread sleeps only until its end, so a late wake-up does not push back
the messages after it. A message is a key header (``[key, step, start]``, float64, tags
``*-key``, no emulated time) then the slice: on the emulated link the pair costs one latency, as
ps-lite's meta and data travel in one message; the header's bytes are in the ledger.
Deviations: workers start from the same seeded model (no initial pull); the key of a small layer
is its forward position (MXNet's is the parameter's index); the model is evaluated once, at the
end, on the servers' slices gathered on rank 0.
The threads, the queue and the links (the transport both roles share) are in
:mod:`lab.sync.p3_transport`.
"""
from __future__ import annotations

import math
import threading
import time

import torch
import torch.distributed as dist

from ..argspec import Arg, takes
from ..comm import Collective, CommLedger
from ..schedule.overlap import traced_layers
from ..schedule.plan import P3_SLICE_SIZE, Unit, make_units
from .base import register
from .p3_transport import KEY, KEY_BYTES, _Gated, _link, _Queue, _Role, _thread, _until  # noqa: F401
from .server import ServerMode, flat, unflat_into

_HASH = 9973         # the authors' placement of a small layer: key * 9973 mod S


def homes(units: list[Unit], sizes: list[int], servers: int, slice_size: int | None) -> list[int]:
    """The home server of each unit, as the authors' KVStore places keys: a layer of at least
    ``slice_size`` values is cut and its ``j``-th slice goes to server ``j mod S``; a smaller
    layer (or every layer when ``slice_size`` is None) goes whole to ``layer * 9973 mod S``."""
    first = {}
    out = []
    for i, u in enumerate(units):
        first.setdefault(u.layer, i)
        if slice_size is None or sizes[u.layer] < slice_size:
            out.append(u.layer * _HASH % servers)
        else:
            out.append((i - first[u.layer]) % servers)
    return out


@register("p3-ps")
@takes(servers=Arg(int, ge=1, none=True, help="parameter-server ranks (default 1)"),
       slice_size=Arg(int, ge=1, none=True, also=(math.inf, "inf"),
                      help="values per slice (None or inf: whole layers)"),
       priority=Arg(bool, help="push and pull by priority (P3), else in FIFO order"),
       colocated=Arg(bool, help="every rank a worker and a server, sharing its link "
                                "(lab.sync.p3_colocated)"))
class P3PS(ServerMode):
    """P3 over ``servers`` parameter servers: sliced, placed round-robin, pushed and pulled by
    priority; the next forward waits per layer."""

    name = "p3-ps"

    def __init__(self, workers: int, servers: int | None = None, slice_size=P3_SLICE_SIZE,
                 priority: bool = True, colocated: bool = False):
        if slice_size in ("inf", None) or slice_size == math.inf:
            slice_size = None   # whole layers
        if colocated and servers is not None:
            raise ValueError(f"sync_kw colocated=True makes every rank a server; servers={servers} "
                             f"cannot be given with it")
        self.colocated = colocated
        # lab passes the ranks less one (rank 0 a server); co-located, every rank is both
        self.n = workers + 1 if colocated else workers
        self.servers = self.n if colocated else (1 if servers is None else servers)
        self.slice_size, self.priority = slice_size, priority

    def placement(self, sizes: list[int]) -> tuple[list[Unit], list[int]]:
        """The messages of a step (units of the layers, values per layer ``sizes``) and each
        one's home server: P3's slices, placed as the authors' KVStore places them."""
        units = make_units(sizes, self.slice_size)
        return units, homes(units, sizes, self.servers, self.slice_size)

    @classmethod
    def batch_ranks(cls, workers: int) -> int:
        return 1   # each worker takes batch_size // n examples, checked below

    @classmethod
    def check(cls, cfg, workers: int) -> None:
        if cfg.sync_kw.get("colocated"):
            cls(workers - 1, **cfg.sync_kw)
            if workers < 2 or cfg.batch_size < workers:
                raise ValueError(f"sync={cfg.sync!r} co-located needs >= 2 ranks and batch_size >= "
                                 f"the {workers} workers, got {workers} and {cfg.batch_size}")
            return
        super().check(cfg, workers)
        s = cls(workers - 1, **cfg.sync_kw).servers
        if workers - s < 1:
            raise ValueError(f"sync_kw servers={s} leaves no worker among {workers} ranks")
        if cfg.batch_size < workers - s:
            raise ValueError(f"batch_size ({cfg.batch_size}) must be >= the {workers - s} workers "
                             f"of sync='p3-ps' (ranks 0..{s - 1} are servers)")
        for r in cfg.slow_ranks:
            if r < s:
                raise ValueError(f"slow_ranks names rank {r}, a parameter server of sync='p3-ps' "
                                 f"(ranks 0..{s - 1}): slow a worker")

    @classmethod
    def run(cls, ctx, cfg, desc: str = ""):
        from ..run.build import engine, evaluate
        from ..run.history import History
        mode = cls(ctx.world_size - 1, **cfg.sync_kw)
        comm = Collective(ledger=CommLedger(), network=cfg.network_at(0))
        e = engine(ctx, cfg, comm)
        x, _ = e.data.batch(0, cfg.batch_size, 0, 1, cfg.seed)
        layers, sites = traced_layers(e.model, x[:8].to(ctx.device), e.params)
        sizes = [sum(p.numel() for p in ps) for _, ps in layers]
        units, home = mode.placement(sizes)
        from .p3_colocated import Colocated
        role = Colocated if mode.colocated else _Server if ctx.rank < mode.servers else _Worker
        log = role(ctx, cfg, e, comm, layers, sites, units, home, mode).run(desc)
        # results bookkeeping after the run (not training traffic, so not in the ledger)
        logs = [None] * ctx.world_size
        dist.all_gather_object(logs, log)
        h = History(cfg.to_dict(), ctx.world_size)
        ws = [g for g in logs if g["role"] in ("worker", "both")]
        h.loss = [sum(g["loss"][t] for g in ws) / len(ws) for t in range(cfg.steps)]
        h.compute_s = [sum(g["compute_s"][t] for g in ws) / len(ws) for t in range(cfg.steps)]
        h.comm_s = [sum(g["comm_s"][t] for g in ws) / len(ws) for t in range(cfg.steps)]
        h.codec_s = [0.0] * cfg.steps
        recs = comm.ledger.records
        for t in range(cfg.steps):
            h.bytes.append(sum(r.bytes for r in recs if r.step == t))
            h.recv_bytes.append(sum(r.recv_bytes for r in recs if r.step == t))
            h.wire_sent.append(sum(r.wire_sent for r in recs if r.step == t))
            h.wire_recv.append(sum(r.wire_recv for r in recs if r.step == t))
            h.modeled_comm_s.append(sum(r.modeled for r in recs if r.step == t))
        h.wall_s = max(g["wall_s"] for g in ws)
        s = h.series
        s["home"], s["unit_layer"] = home, [u.layer for u in units]
        s["unit_numel"] = [u.numel for u in units]
        # per worker, one row per push: step, key, arrival number in the queue, seconds from
        # the start when queued and when sent, keys left waiting in the queue when it was taken
        s["pushes"] = [g["pushes"] for g in ws]
        s["keys_by_server"] = [g["keys"] for g in logs if g["role"] in ("server", "both")]
        if ctx.rank == 0:  # the servers' slices, put together, are the model evaluated
            model = [flat(ps) for _, ps in layers]
            for g in logs:
                for k, v in g.get("params", {}).items():
                    model[units[k].layer][units[k].start:units[k].stop] = v
            with torch.no_grad():
                for vec, (_, ps) in zip(model, layers):
                    unflat_into(vec.to(ctx.device), ps)
            tl, ta = evaluate(e.model, e.data, ctx.device)
            h.eval_step, h.test_loss, h.test_acc = [cfg.steps], [tl], [ta]
        h.rank_bytes = [comm.ledger.total_bytes()]
        return h


class _Server(_Role):
    """Holds its slices and one optimizer per slice; answers every worker when all pushed."""

    def run(self, desc: str) -> dict:
        e, units = self.e, self.units
        mine = [k for k, h in enumerate(self.home) if h == self.ctx.rank]
        model = [flat(ps) for _, ps in self.layers]
        self.params = {}
        for k in mine:  # this server's slices, each with its own optimizer state
            u = units[k]
            self.params[k] = model[u.layer][u.start:u.stop].clone().requires_grad_()
        opt = e.optimizer
        opts = {k: type(opt)([p], **opt.defaults) for k, p in self.params.items()}
        got: dict[int, dict[int, torch.Tensor]] = {k: {} for k in mine}
        done_by_step = [0] * self.cfg.steps
        sender = _thread(self._sending, self.errors)
        hdr = torch.empty(KEY, dtype=torch.float64)
        for _ in range(len(mine) * self.n * self.cfg.steps):
            w, k, step = self._recv_header(hdr, "push")
            buf = torch.empty(units[k].numel)
            delivered = self._recv(buf, w, "push")
            got[k][w] = buf
            if len(got[k]) == self.n:  # the barrier of this slice: every worker's push is in
                g = torch.stack([got[k][r] for r in sorted(got[k])]).sum(0) * (1.0 / self.n)
                if not torch.isfinite(g).all():
                    raise FloatingPointError(f"non-finite gradient for slice {k} at step {step}")
                t0 = time.perf_counter()
                self.params[k].grad = g
                opts[k].step()
                got[k] = {}
                ready = delivered + time.perf_counter() - t0  # the update after the last push
                self.sendq.put(k, (k, step, self.params[k].detach().clone(), ready))
                done_by_step[step] += 1
                if done_by_step[step] == len(mine):
                    self.ctx.progress(step + 1, self.cfg.steps, desc or self.cfg.name)
            self._raise()
        self.sendq.close()
        sender.join()
        self._raise()
        return {"role": "server", "keys": mine,
                "params": {k: p.detach().clone() for k, p in self.params.items()}}

    def _sending(self) -> None:
        workers = range(self.S, self.ctx.world_size)
        while (got := self.sendq.get()) is not None:
            k, step, value, ready = got[0]
            for w in workers:  # one uplink: the workers are answered one after another
                self._send(k, step, value, w, "pull", ready)
        for w in workers:
            self.up_key.send(torch.tensor([-1.0, -1.0, 0.0], dtype=torch.float64), w, tag="stop")


class _Worker(_Gated, _Role):
    """Computes; pushes slices by priority on one thread, pulls them on another."""

    def run(self, desc: str) -> dict:
        cfg, e, L = self.cfg, self.e, len(self.layers)
        self.of_layer = [[k for k, u in enumerate(self.units) if u.layer == l] for l in range(L)]
        self.avail = [threading.Event() for _ in range(L)]
        for ev in self.avail:
            ev.set()
        self.grads: dict[int, torch.Tensor] = {}
        self.pushes, self.t0 = [], time.perf_counter()
        hooks = [site.register_forward_pre_hook(self._before(ls))
                 for site, ls in self.sites.items()]
        hooks += [p.register_post_accumulate_grad_hook(self._ready(l))
                  for l, (_, ps) in enumerate(self.layers) for p in ps]
        wake = lambda: [ev.set() for ev in self.avail]  # noqa: E731 - a failed thread wakes waits
        threads = [_thread(f, self.errors, wake) for f in (self._pushing, self._pulling)]
        n, index = self.n, self.ctx.rank - self.S
        log = {"role": "worker", "loss": [], "compute_s": [], "comm_s": [], "pushes": self.pushes}
        start, ok = time.perf_counter(), False
        try:
            for step in range(cfg.steps):
                t0, self.waited, self.step = time.perf_counter(), 0.0, step
                x, y = e.data.batch(step, n * (cfg.batch_size // n), index, n, cfg.seed)
                out = e.model(x.to(self.ctx.device))   # waits, layer by layer, for its slices
                for l in range(L):
                    self._wait(l)
                loss = e.loss_fn(out, y.to(self.ctx.device))
                if not torch.isfinite(loss):
                    raise FloatingPointError(f"step {step}: loss is {loss.item()} on rank "
                                             f"{self.ctx.rank} (lr={cfg.lr} too large?)")
                e.optimizer.zero_grad(set_to_none=False)
                self.left = [len(ps) for _, ps in self.layers]
                for ev in self.avail:
                    ev.clear()
                loss.backward()                          # queues slices as layers finish
                if e.straggler is not None:
                    e.straggler.pause(time.perf_counter() - t0 - self.waited)
                if step == cfg.steps - 1:                # the final model must be back
                    for l in range(L):
                        self._wait(l)
                wall = time.perf_counter() - t0
                log["loss"].append(float(loss.detach()))
                log["compute_s"].append(wall - self.waited)
                log["comm_s"].append(self.waited)
            ok = True
        finally:  # normally the threads end with the servers' stop; on an error do not wait
            self.sendq.close()
            for t in threads:
                t.join(timeout=None if ok else 1.0)
            for hk in hooks:
                hk.remove()
        self._raise()
        log["wall_s"] = time.perf_counter() - start
        return log

    # -- hooks (main thread) --------------------------------------------------------------
    def _ready(self, layer: int):
        def hook(_p):
            self.left[layer] -= 1
            if self.left[layer] == 0:  # the layer's gradient, whole: queue its slices
                ps = self.layers[layer][1]
                self.grads[layer] = flat(p.grad for p in ps)
                now = time.perf_counter()
                for k in self.of_layer[layer]:
                    self.sendq.put(k, (k, self.step, now))
        return hook

    # -- the two threads ------------------------------------------------------------------
    def _pushing(self) -> None:
        while (got := self.sendq.get()) is not None:
            (k, step, queued), seq, waiting = got
            u = self.units[k]
            sent = time.perf_counter()
            self._send(k, step, self.grads[u.layer][u.start:u.stop], self.home[k], "push", queued)
            self.pushes.append([step, k, seq, queued - self.t0, sent - self.t0, waiting])

    def _pulling(self) -> None:
        bufs = [torch.empty(sum(p.numel() for p in ps)) for _, ps in self.layers]
        left = [len(ks) for ks in self.of_layer]
        hdr, stops = torch.empty(KEY, dtype=torch.float64), 0
        while stops < self.S:
            src, k, step = self._recv_header(hdr, "pull")
            if k < 0:
                stops += 1
                continue
            u = self.units[k]
            self._recv(bufs[u.layer][u.start:u.stop], src, "pull")
            left[u.layer] -= 1
            if left[u.layer] == 0:  # the layer is whole again: the next forward may use it
                left[u.layer] = len(self.of_layer[u.layer])
                with torch.no_grad():
                    unflat_into(bufs[u.layer].to(self.ctx.device), self.layers[u.layer][1])
                self.avail[u.layer].set()
