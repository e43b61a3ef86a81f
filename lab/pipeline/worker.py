"""``StageWorker``: one rank's stage, executing a schedule's actions F(k), B(k) and U.

Synchronous schedules (GPipe, 1F1B) keep each micro-batch's autograd graph from its forward
pass to its backward pass; the weights do not change in between, so the summed gradient is
the unsplit model's. Asynchronous schedules update between the two passes. ``async`` and
``async-nesterov`` (PipeDream without stashing) run the forward pass without a graph and keep
only its input; the backward pass runs the forward again at the *current* weights and
backpropagates (the price: one more forward pass). ``async-stash`` runs the forward pass on a
stashed copy of the weights and keeps its graph, so the backward pass is evaluated at the
weights the forward pass used (the price: one weight copy per micro-batch in flight). With
``recompute`` (the authors' ``--recompute`` with their weight stash, ``main_with_runtime.py``:
``load_old_params()`` before each backward pass) it keeps the stashed copy and the input only,
and runs the forward again on that copy in the backward pass: the same gradient as keeping the
graph, for one more forward pass and no activations held.

Time: a pass is timed as computed, and a straggler's slowdown stretches it by sleeping; with
``forward_s`` the stage is an emulated device instead, each pass lasting a fixed time (a
backward pass twice it) times the slowdown, whatever the host's load (it computes, then sleeps
the rest), so that timings on a shared machine are those of the schedule.
"""
from __future__ import annotations

import time

import torch
from torch.func import functional_call

from .stash import WeightStash


class StageWorker:
    def __init__(self, module, mesh, loss_fn, asynchronous: bool, stash: bool, scale: float,
                 in_shape, out_shape, straggler, clock0: float, recompute: bool = False,
                 forward_s: float | None = None):
        self.module, self.mesh, self.loss_fn = module, mesh, loss_fn
        self.recompute = asynchronous and (not stash or recompute)  # forward again at backward
        self.asynchronous, self.scale = asynchronous, scale
        self.stash = WeightStash(module) if stash else None
        self.in_shape, self.out_shape = in_shape, out_shape
        self.straggler, self.clock0, self.forward_s = straggler, clock0, forward_s
        self.version = 0                      # updates applied on this stage so far
        self.inflight: dict[int, dict] = {}
        self.log: dict[str, list] = {k: [] for k in ("staleness", "fwd_sum", "bwd_sum", "timeline")}
        self.compute: dict[int, float] = {}   # step -> seconds computing
        self.idle: dict[int, float] = {}      # step -> seconds blocked waiting for a peer
        self.live_bytes, self.peak_bytes, self.peak_stash = 0, {}, {}
        self.losses: dict[int, list[float]] = {}

    # -- helpers --------------------------------------------------------------------------
    def _recv(self, shape, src, tag, step):
        buf = torch.empty(shape)
        t0 = time.perf_counter()
        self.mesh.ledger.step = step
        self.mesh.pp.recv(buf, src, tag)
        self.idle[step] = self.idle.get(step, 0.0) + time.perf_counter() - t0
        return buf

    def _timed(self, kind, k, step, fn):
        t0 = time.perf_counter()
        out = fn()
        t1 = time.perf_counter()
        if self.forward_s is None:  # the measured compute, stretched by the slowdown
            t1 += self.straggler.pause(t1 - t0)
        else:  # an emulated device: the pass lasts its fixed time, times the slowdown
            left = self.forward_s * (2 if kind == "B" else 1) * self.straggler.factor - (t1 - t0)
            if left > 0:
                time.sleep(left)
            self.straggler.pause(0.0)  # its jitter, if any
            t1 = time.perf_counter()
        self.compute[step] = self.compute.get(step, 0.0) + t1 - t0
        self.log["timeline"].append((kind, k, t0 - self.clock0, t1 - self.clock0))
        return out

    def _weights_sum(self, weights=None) -> float:
        ws = weights.values() if weights is not None else self.module.parameters()
        return float(sum(w.detach().double().sum() for w in ws))

    def _loss(self, out, y):
        loss = self.loss_fn(out, y)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite loss {float(loss.detach())} on the last stage")
        return loss

    # -- actions --------------------------------------------------------------------------
    def forward(self, k: int, step: int, x, y) -> None:
        m = self.mesh
        inp = x if m.first else self._recv(self.in_shape, m.prev, "act", step)
        recompute = self.recompute
        if inp.is_floating_point() and not recompute:
            inp.requires_grad_()
        rec = {"inp": inp, "y": y, "version": self.version, "bytes": 0}

        def run():
            if recompute:  # keep only the input; the backward pass runs the forward again
                rec["bytes"] = inp.numel() * inp.element_size()
                if self.stash is not None:  # the weights its backward pass will run at
                    self.stash.save(k)
                with torch.no_grad():
                    out = self.module(inp)
                    if m.last:
                        rec["loss_value"] = float(self._loss(out, y))
                    return out
            weights = self.stash.save(k) if self.stash is not None else None
            skip = {p.data_ptr() for p in self.module.parameters()}
            skip |= {w.data_ptr() for w in (weights or {}).values()}

            def count(t):  # bytes autograd keeps for the backward pass: activations, not weights
                if t.data_ptr() not in skip:
                    rec["bytes"] += t.numel() * t.element_size()
                return t
            with torch.autograd.graph.saved_tensors_hooks(count, lambda t: t):
                out = self.module(inp) if weights is None else functional_call(self.module, weights, (inp,))
                if m.last:
                    rec["loss"] = self._loss(out, y)
                    rec["loss_value"] = float(rec["loss"].detach())
            rec["out"] = out
            return out
        out = self._timed("F", k, step, run)
        if self.asynchronous:
            self.log["fwd_sum"].append((k, self._weights_sum()))
        self.live_bytes += rec["bytes"]
        self.peak_bytes[step] = max(self.peak_bytes.get(step, 0), self.live_bytes)
        if self.stash is not None:
            self.peak_stash[step] = max(self.peak_stash.get(step, 0), self.stash.nbytes)
        self.inflight[k] = rec
        if m.last:
            self.losses.setdefault(step, []).append(rec["loss_value"])
        else:
            m.send(out.detach(), m.next, "act", step)

    def backward(self, k: int, step: int) -> None:
        m = self.mesh
        grad_out = None if m.last else self._recv(self.out_shape, m.next, "grad", step)
        rec = self.inflight.pop(k)
        inp = rec["inp"]

        def run():
            if not self.asynchronous:
                target = rec["loss"] * self.scale if m.last else rec["out"]
                target.backward(None if m.last else grad_out)
                return inp.grad
            names = [n for n, _ in self.module.named_parameters()]
            if self.stash is not None and not self.recompute:  # the forward's graph, on its weights
                weights = self.stash.pop(k)
                target = rec["loss"] * self.scale if m.last else rec["out"]
            else:  # the forward pass again: at the stashed weights, else at the current ones
                weights = (self.stash.pop(k) if self.stash is not None
                           else dict(self.module.named_parameters()))
                if inp.is_floating_point():
                    inp.requires_grad_()
                out = functional_call(self.module, weights, (inp,))
                target = self._loss(out, rec["y"]) * self.scale if m.last else out
            self.log["bwd_sum"].append((k, self._weights_sum(weights)))
            leaves = [weights[n] for n in names] + ([inp] if inp.requires_grad else [])
            grads = torch.autograd.grad(target, leaves, None if m.last else grad_out)
            for p, g in zip(self.module.parameters(), grads):
                p.grad = g if p.grad is None else p.grad + g
            return grads[-1] if inp.requires_grad else None
        grad_in = self._timed("B", k, step, run)
        self.live_bytes -= rec["bytes"]
        self.log["staleness"].append((k, self.version - rec["version"]))
        if not m.first:
            m.send(grad_in, m.prev, "grad", step)

