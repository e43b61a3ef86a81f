"""A parameter server over ``lab.comm`` point-to-point messages, and the loop of its workers.

Rank 0 holds the model and the optimizer; ranks 1..n are workers (Li et al., "Scaling
distributed machine learning with the parameter server", OSDI 2014, sec. 3: workers *push*
gradients and *pull* parameters). Here a pull is the server's reply to a push, so a worker
talks only to the server, every message crosses ``Collective.send/recv`` and every byte is in
both ledgers. Messages are one float32 vector: a header then the payload.

* push (worker -> server): ``[version, loss, compute_s, wait_s | gradient]``, ``version`` being
  the server clock of the parameters the gradient was computed on;
* reply (server -> worker): ``[version, clock | parameters]``, or ``version = -1``: stop;
  ``clock`` is the worker's own step count (gradients it has pushed), which picks its batch: the
  server keeps it, so a resumed run tells each worker where it stands.

Work is counted in *grants*: each reply with parameters lets one worker compute one gradient,
and the server grants ``steps x n`` in all, so every mode does the same work. A mode
(:class:`ServerMode` subclass) only decides, per push, what to apply and whom to answer
(:meth:`ServerMode.on_push`); :class:`Server` does the rest. Rank 0's History has one entry
per ``n`` gradients processed (a "step" of the equal-work comparison) and, in ``series``, one
value per gradient (``worker``, ``staleness`` = server clock minus ``version``, ``applied``,
``gap`` = the worker's clock minus the slowest worker's when it was granted that gradient,
``worker_compute_s``, ``t_s``), one per step (``traffic``: :func:`link_traffic`) and one
per worker (``grads_by_worker``, ``wait_s_by_worker``: seconds blocked waiting for the server's
reply), plus ``dropped``.
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist

from .. import schedule
from ..argspec import Arg, takes
from ..comm import Collective, CommLedger
from .base import SyncMode

HEADER = 4
STOP = -1.0


def flat(tensors) -> torch.Tensor:
    return torch.cat([t.detach().reshape(-1).float().cpu() for t in tensors])


def unflat_into(vec: torch.Tensor, tensors) -> None:
    """Copy ``vec`` into ``tensors`` (in order), e.g. pulled parameters into the model."""
    i = 0
    for t in tensors:
        t.copy_(vec[i:i + t.numel()].view_as(t))
        i += t.numel()


def link_traffic(records) -> dict:
    """``{op: [calls, bytes]}`` through the server's link in one step: a ``recv`` (a push)
    counts the bytes it received, so that the alpha-beta price of this equals the modeled time
    the emulated link spent (the method advisor prices it, :mod:`lab.advise.estimate`)."""
    out: dict = {}
    for r in records:
        acc = out.setdefault(r.op, [0, 0])
        acc[0] += 1
        acc[1] += r.recv_bytes if r.op == "recv" else r.bytes
    return out


@takes(workers=Arg(int, ge=1, help="worker ranks (lab passes it)"))
class ServerMode(SyncMode):
    """Base of the parameter-server modes; a subclass says how a push is handled."""

    own_loop = True
    #: Whether a checkpoint at a step boundary can be resumed: the server re-grants every
    #: worker then, which only BSP (nothing in flight) and the modes without a bound do safely.
    resumable = False

    def __init__(self, workers: int):
        self.n = workers

    def on_push(self, srv: "Server", w: int, grad: torch.Tensor, version: int) -> bool:
        """Handle worker ``w``'s gradient (computed at server clock ``version``): apply it now
        or later and answer whom it may (``srv.release``). False if it is discarded."""
        raise NotImplementedError

    @classmethod
    def batch_ranks(cls, workers: int) -> int:
        return 1  # each worker takes batch_size // n examples (see ``work``), checked below

    @classmethod
    def check(cls, cfg, workers: int) -> None:
        if workers < 2:
            raise ValueError(f"sync={cfg.sync!r} needs workers >= 2 (rank 0 is the parameter "
                             f"server), got {workers}")
        n = workers - 1
        if cfg.batch_size < n:
            raise ValueError(f"batch_size ({cfg.batch_size}) must be >= the {n} workers of "
                             f"sync={cfg.sync!r} (rank 0 is the server)")
        if 0 in cfg.slow_ranks:
            raise ValueError(f"slow_ranks names rank 0, the parameter server of sync={cfg.sync!r}, "
                             "which computes no gradients: slow a worker (rank >= 1)")
        for name, default in (("schedule", "sync"), ("averaging", "none"), ("compressor", "none"),
                              ("attack", "none"), ("byzantine", 0), ("error_feedback", False)):
            if getattr(cfg, name) != default:
                raise ValueError(f"sync={cfg.sync!r} runs its own server loop: {name} must be "
                                 f"{default!r}, got {getattr(cfg, name)!r}")
        if cfg.aggregator not in ("auto", "allreduce"):
            raise ValueError(f"sync={cfg.sync!r} averages on the server: aggregator must be "
                             f"'auto', got {cfg.aggregator!r}")
        try:
            cls(n, **cfg.sync_kw)
        except TypeError as e:
            raise ValueError(f"sync_kw {cfg.sync_kw!r} not understood by sync={cfg.sync!r}: "
                             f"{e}") from None

    @classmethod
    def run(cls, ctx, cfg, desc: str = "", checkpoint: dict | None = None):
        """``checkpoint``: ``{"every", "dir", "resume"}`` (:mod:`lab.run.checkpoint`); only the
        server (rank 0) holds state worth keeping, so only it writes and reads checkpoints."""
        from ..run.build import engine
        from ..run.history import History
        comm = Collective(ledger=CommLedger(), network=cfg.network_at(0))
        e = engine(ctx, cfg, comm)
        h = History(cfg.to_dict(), ctx.world_size)
        if ctx.rank == 0:
            srv = Server(ctx, cfg, e, comm, cls(ctx.world_size - 1, **cfg.sync_kw), h)
            srv.keep(checkpoint)
            srv.serve(desc)
            h = srv.h  # the checkpointed History, when resumed
        else:
            work(ctx, cfg, e, comm)
        # results bookkeeping after the run (not training traffic, so not in the ledger):
        # every rank returns the same loss curve, which the merge averages
        box = [h.loss]
        dist.broadcast_object_list(box, src=0)
        h.loss = list(box[0])
        h.rank_bytes = [comm.ledger.total_bytes()]
        return h


def work(ctx, cfg, e, comm: Collective) -> None:
    """A worker: pull (wait for the reply), compute one gradient, push; until told to stop."""
    n = ctx.world_size - 1
    # its forward_backward: loss check + straggler pause; the server is not in an allreduce, so
    # the time an exchange ends is not set by the last rank's arrival (no board to agree on)
    sched = schedule.make("sync", e, arrival="own")
    d = sum(p.numel() for p in e.params)
    buf = torch.empty(HEADER + d)
    while True:
        t0 = time.perf_counter()
        comm.recv(buf, 0, tag="pull")
        wait = time.perf_counter() - t0
        version, clock = float(buf[0]), int(buf[1])
        if version == STOP:
            return
        with torch.no_grad():
            unflat_into(buf[HEADER:], e.params)
        comm.network = cfg.network_at(clock)
        # the global batch, rounded down to a multiple of n, split over the workers
        x, y = e.data.batch(clock, n * (cfg.batch_size // n), ctx.rank - 1, n, cfg.seed)
        loss, compute = sched.forward_backward(clock, x.to(ctx.device), y.to(ctx.device))
        head = torch.tensor([version, float(loss), compute, wait])
        comm.send(torch.cat([head, flat(p.grad for p in e.params)]), 0, tag="push")


class Server:
    """Rank 0: serves ``n`` workers in arrival order until ``steps x n`` gradients are in."""

    def __init__(self, ctx, cfg, e, comm: Collective, mode: ServerMode, history):
        self.ctx, self.cfg, self.e, self.comm, self.mode, self.h = ctx, cfg, e, comm, mode, history
        self.n = ctx.world_size - 1
        self.limit = cfg.steps * self.n
        self.version = 0             # server clock: updates applied so far
        self.clock = [0] * (self.n + 1)   # gradients received from each worker (index = rank)
        self.granted = 0
        self.done: set[int] = set()
        self.grant_gap = [0] * (self.n + 1)
        self.apply_s = 0.0
        s = self.h.series
        for k in ("worker", "staleness", "applied", "gap", "worker_compute_s", "t_s", "traffic"):
            s[k] = []
        s["grads_by_worker"] = [0] * self.n
        s["wait_s_by_worker"] = [0.0] * self.n
        s["dropped"] = 0
        self.ck, self.processed, self.past_wall = None, 0, 0.0

    def keep(self, checkpoint: dict | None) -> None:
        """Write checkpoints (``checkpoint["every"]``) and/or resume (``checkpoint["resume"]``):
        the model, optimizer, clocks and History at a step boundary. Resuming re-grants every
        worker with the current parameters, which is exactly where BSP stands at a boundary."""
        if checkpoint is None:
            return
        from ..run import checkpoint as ck
        if checkpoint["every"]:
            self.ck = ck.Checkpointer(checkpoint["every"], checkpoint["dir"], 0,
                                      self.ctx.world_size, self.cfg.to_dict(), "train",
                                      collective=False)
        if checkpoint["resume"] is not None:
            saved = ck.load(checkpoint["resume"], 0)
            self.e.model.load_state_dict(saved["model"])
            self.e.optimizer.load_state_dict(saved["optimizer"])
            self.version, self.clock = saved["version"], list(saved["clock"])
            self.processed = self.granted = sum(self.clock)
            self.h, self.past_wall = saved["history"], saved["wall_s"]
            ck.set_rng_state(saved["rng"])

    def _checkpoint(self, step: int, wall_s: float) -> None:
        from ..run import checkpoint as ck
        self.ck.write(step, {"model": self.e.model.state_dict(),
                             "optimizer": self.e.optimizer.state_dict(),
                             "version": self.version, "clock": list(self.clock),
                             "history": self.h, "wall_s": wall_s, "rng": ck.rng_state()})

    # -- what modes call -----------------------------------------------------------------
    def slowest(self) -> int:
        """The smallest clock among workers still working (SSP's reference point)."""
        return min(self.clock[w] for w in range(1, self.n + 1) if w not in self.done)

    def apply(self, grads: list[torch.Tensor], scale: float) -> None:
        """One optimizer step with gradient ``scale x sum(grads)``; the server clock ticks."""
        t0 = time.perf_counter()
        g = torch.stack(grads).sum(0) * scale
        if not torch.isfinite(g).all():
            raise FloatingPointError(f"non-finite gradient reached the server at update "
                                     f"{self.version}")
        for p in self.e.params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        unflat_into(g.to(self.ctx.device), [p.grad for p in self.e.params])
        self.e.optimizer.step()
        self.version += 1
        self.apply_s += time.perf_counter() - t0

    def release(self, w: int) -> None:
        """Answer worker ``w``: fresh parameters (one more grant), or stop if all are granted."""
        if self.granted < self.limit:
            self.grant_gap[w] = self.clock[w] - self.slowest()
            head = torch.tensor([float(self.version), float(self.clock[w]), 0.0, 0.0])
            self.comm.send(torch.cat([head, flat(self.e.params)]), w, tag="reply")
            self.granted += 1
        else:
            self.comm.send(torch.full((HEADER + self._d,), STOP), w, tag="stop")
            self.done.add(w)

    # -- the loop -------------------------------------------------------------------------
    def serve(self, desc: str) -> None:
        cfg, h, s, n = self.cfg, self.h, self.h.series, self.n
        self._d = sum(p.numel() for p in self.e.params)
        buf = torch.empty(HEADER + self._d)
        start = block_start = time.perf_counter()
        mark, losses, processed, eval_s = self.comm.ledger.mark(), [], self.processed, 0.0
        for w in range(1, n + 1):
            self.release(w)
        if self.processed:  # resumed: these grants were counted in the checkpointed step
            mark = self.comm.ledger.mark()
        while len(self.done) < n:
            w = self.comm.recv_any(buf, tag="push")
            version, loss, compute, wait = (float(v) for v in buf[:HEADER])
            self.clock[w] += 1
            processed += 1
            losses.append(loss)
            s["grads_by_worker"][w - 1] += 1
            s["wait_s_by_worker"][w - 1] += wait
            s["worker"].append(w)
            s["staleness"].append(self.version - int(version))
            s["gap"].append(self.grant_gap[w])
            s["worker_compute_s"].append(compute)
            s["t_s"].append(time.perf_counter() - start - eval_s)
            applied = self.mode.on_push(self, w, buf[HEADER:].clone(), int(version))
            s["applied"].append(int(applied))
            s["dropped"] += int(not applied)
            if processed % n == 0:  # one step of the equal-work comparison
                step = processed // n
                recs = self.comm.ledger.since(mark)
                interval = time.perf_counter() - block_start
                h.loss.append(sum(losses) / len(losses))
                h.bytes.append(sum(r.bytes for r in recs))
                h.recv_bytes.append(sum(r.recv_bytes for r in recs))
                h.wire_sent.append(sum(r.wire_sent for r in recs))
                h.wire_recv.append(sum(r.wire_recv for r in recs))
                h.compute_s.append(self.apply_s)
                h.codec_s.append(0.0)
                h.comm_s.append(max(0.0, interval - self.apply_s))
                h.modeled_comm_s.append(sum(r.modeled for r in recs))
                s["traffic"].append(link_traffic(recs))
                if (cfg.eval_every and step % cfg.eval_every == 0) or step == cfg.steps:
                    from ..run.build import evaluate
                    t0 = time.perf_counter()
                    tl, ta = evaluate(self.e.model, self.e.data, self.ctx.device)
                    h.eval_step.append(step)
                    h.test_loss.append(tl)
                    h.test_acc.append(ta)
                    eval_s += time.perf_counter() - t0
                if self.ck is not None and self.ck.due(step, cfg.steps):
                    self._checkpoint(step, self.past_wall + time.perf_counter() - start - eval_s)
                self.ctx.progress(step, cfg.steps, desc or cfg.name)
                mark, losses, self.apply_s = self.comm.ledger.mark(), [], 0.0
                block_start = time.perf_counter()
        h.wall_s = self.past_wall + time.perf_counter() - start - eval_s
        s["updates"] = self.version
