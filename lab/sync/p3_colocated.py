"""Co-located parameter servers for ``p3-ps`` and ``kvstore`` (``sync_kw colocated=True``): every
rank is a worker *and* the server of its share of the slices, as in the paper's cluster
(Jayarajan et al., SysML 2019, Section 5: "each machine runs one worker and one server") and in
MXNet's usual launch, where a machine's worker and server share its NIC.

One rank, one NIC: one sending thread drains one priority queue holding the worker's pushes and
the server's replies (ps-lite runs one van per process), and one receiving thread takes both
kinds (a header's key says which: ``key`` for a push, ``key + units`` for a reply), so pushes
and replies share the rank's uplink and downlink clocks. A push to the rank's own server and a
reply to its own worker do not cross the network: they are handed over in memory, with no
record in the ledger. The server part sums a slice once every worker (every rank) has pushed
it, in rank order, so the parameters are those of ``bsp`` with as many workers.
"""
from __future__ import annotations

import threading
import time

import torch

from .p3_transport import KEY, _Gated, _Role, _thread
from .server import flat, unflat_into


class Colocated(_Gated, _Role):
    """A worker and a server in one rank (see the module's doc)."""

    def run(self, desc: str) -> dict:
        cfg, e, units, me = self.cfg, self.e, self.units, self.ctx.rank
        L, U, n = len(self.layers), len(units), self.ctx.world_size
        self.U, self.lock = U, threading.Lock()
        model = [flat(ps) for _, ps in self.layers]
        self.mine = [k for k, h in enumerate(self.home) if h == me]
        self.params = {k: model[units[k].layer][units[k].start:units[k].stop].clone()
                       .requires_grad_() for k in self.mine}
        opt = e.optimizer
        self.opts = {k: type(opt)([p], **opt.defaults) for k, p in self.params.items()}
        self.got: dict = {k: {} for k in self.mine}
        self.of_layer = [[k for k, u in enumerate(units) if u.layer == l] for l in range(L)]
        self.left_pull = [len(ks) for ks in self.of_layer]
        self.bufs = [torch.empty(sum(p.numel() for p in ps)) for _, ps in self.layers]
        self.avail = [threading.Event() for _ in range(L)]
        for ev in self.avail:
            ev.set()
        self.grads: dict = {}
        self.pushes, self.t0 = [], time.perf_counter()
        remote = sum(1 for k in range(U) if self.home[k] != me)
        self.n_sends = cfg.steps * (remote + len(self.mine) * (n - 1))
        self.n_recvs = cfg.steps * (len(self.mine) * (n - 1) + remote)
        hooks = [site.register_forward_pre_hook(self._before(ls)) for site, ls in self.sites.items()]
        hooks += [p.register_post_accumulate_grad_hook(self._ready(l))
                  for l, (_, ps) in enumerate(self.layers) for p in ps]
        wake = lambda: [ev.set() for ev in self.avail]  # noqa: E731 - a failed thread wakes waits
        threads = [_thread(f, self.errors, wake) for f in (self._sending, self._receiving)]
        log = {"role": "both", "loss": [], "compute_s": [], "comm_s": [], "pushes": self.pushes}
        start, ok = time.perf_counter(), False
        try:
            for step in range(cfg.steps):
                t0, self.waited, self.step = time.perf_counter(), 0.0, step
                x, y = e.data.batch(step, n * (cfg.batch_size // n), me, n, cfg.seed)
                out = e.model(x.to(self.ctx.device))
                for layer in range(L):
                    self._wait(layer)
                loss = e.loss_fn(out, y.to(self.ctx.device))
                if not torch.isfinite(loss):
                    raise FloatingPointError(f"step {step}: loss is {loss.item()} on rank {me}")
                e.optimizer.zero_grad(set_to_none=False)
                self.left = [len(ps) for _, ps in self.layers]
                for ev in self.avail:
                    ev.clear()
                loss.backward()
                if e.straggler is not None:
                    e.straggler.pause(time.perf_counter() - t0 - self.waited)
                if step == cfg.steps - 1:
                    for layer in range(L):
                        self._wait(layer)
                log["loss"].append(float(loss.detach()))
                log["compute_s"].append(time.perf_counter() - t0 - self.waited)
                log["comm_s"].append(self.waited)
            ok = True
        finally:
            self.sendq.close()
            for t in threads:
                t.join(timeout=None if ok else 1.0)
            for hk in hooks:
                hk.remove()
        self._raise()
        log.update(wall_s=time.perf_counter() - start, keys=self.mine,
                   params={k: p.detach().clone() for k, p in self.params.items()})
        return log

    # -- the worker's hooks (main thread) -------------------------------------------------
    def _ready(self, layer: int):
        def hook(_p):
            self.left[layer] -= 1
            if self.left[layer] == 0:
                self.grads[layer] = flat(p.grad for p in self.layers[layer][1])
                now = time.perf_counter()
                for k in self.of_layer[layer]:
                    self.sendq.put(k, ("push", k, self.step, now, self.home[k]))
        return hook

    # -- the server part (sender or receiver thread) --------------------------------------
    def _push_in(self, k: int, w: int, step: int, value: torch.Tensor, at: float) -> None:
        with self.lock:
            self.got[k][w] = value
            if len(self.got[k]) < self.ctx.world_size:
                return
            t0 = time.perf_counter()
            g = torch.stack([self.got[k][r] for r in sorted(self.got[k])]).sum(0) \
                * (1.0 / self.ctx.world_size)
            self.params[k].grad = g
            self.opts[k].step()
            self.got[k] = {}
            value, ready = self.params[k].detach().clone(), at + time.perf_counter() - t0
        for w in range(self.ctx.world_size):   # every worker, by priority, on one uplink
            self.sendq.put(k, ("pull", k, step, ready, w, value))
        if step == self.cfg.steps - 1 and k == self.mine[-1]:
            self.ctx.progress(step + 1, self.cfg.steps, self.cfg.name)

    def _pull_in(self, k: int, value: torch.Tensor) -> None:
        u = self.units[k]
        self.bufs[u.layer][u.start:u.stop] = value
        self.left_pull[u.layer] -= 1
        if self.left_pull[u.layer] == 0:
            self.left_pull[u.layer] = len(self.of_layer[u.layer])
            with torch.no_grad():
                unflat_into(self.bufs[u.layer].to(self.ctx.device), self.layers[u.layer][1])
            self.avail[u.layer].set()

    # -- one NIC: one sending and one receiving thread ------------------------------------
    def _sending(self) -> None:
        me, sent = self.ctx.rank, 0
        while (got := self.sendq.get()) is not None:
            (kind, k, step, ready, dst, *value), seq, waiting = got
            u = self.units[k]
            if kind == "push":
                payload = self.grads[u.layer][u.start:u.stop]
                self.pushes.append([step, k, seq, ready - self.t0, time.perf_counter() - self.t0,
                                    waiting])
            else:
                payload = value[0]
            if dst == me:   # the rank's own server, or its own worker: in memory
                (self._push_in(k, me, step, payload.clone(), ready) if kind == "push"
                 else self._pull_in(k, payload))
                continue
            self._send(k + (0 if kind == "push" else self.U), step, payload, dst, kind, ready)
            sent += 1

    def _receiving(self) -> None:
        hdr = torch.empty(KEY, dtype=torch.float64)
        for _ in range(self.n_recvs):
            src, code, step = self._recv_header(hdr, "msg")
            k = code % self.U
            buf = torch.empty(self.units[k].numel)
            at = self._recv(buf, src, "push" if code < self.U else "pull")
            if code < self.U:
                self._push_in(k, src, step, buf, at)
            else:
                self._pull_in(k, buf)
