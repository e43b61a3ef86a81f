"""Deep Gradient Compression (DGC), each of its tricks switchable for an ablation.

Lin, Han, Mao, Wang, Dally, "Deep Gradient Compression: Reducing the Communication Bandwidth
for Distributed Training", ICLR 2018, Algorithm 1 and Sec. 3. Per tensor (``key``), with
velocity u and accumulation v starting at zero:

- local gradient clipping (Sec. 3.2): clip this rank's gradient to norm ``clip_norm * N^-1/2``
  (N = world size) before accumulating, so the N summed gradients respect ``clip_norm``;
  the paper clips layer by layer: with ``lab.train`` that means ``layerwise=True``, otherwise
  the codec sees (and clips) the whole flattened gradient at once;
- momentum correction (Sec. 3.2): u <- m u + g;  v <- v + u  (without it: v <- v + g);
- sparsification (Sec. 3.1): send the top ``density`` of |v| (exact, or the sampled threshold of
  Sec. 5, see :mod:`lab.compress.topk_sampled`), then clear v where sent;
- momentum factor masking (Sec. 3.3): also clear u where sent, so stale momentum does not keep
  pushing coordinates that were just applied;
- warm-up (Sec. 3.3): density 25%, 6.25%, 1.5625%, 0.390625% for ``warmup_steps`` steps each
  (sparsity 75%, 93.75%, 98.4375%, 99.6%: the paper warms up per epoch), then ``density``
  (99.9% sparsity by default).

Because DGC owns the momentum when ``momentum_correction`` is on, the optimizer must then run
*without* momentum (plain SGD on the aggregated values), or momentum is applied twice.
The step used by the warm-up is the codec's own per-key call count, unless the caller sets it
with :meth:`set_step`. Payload ``(values, int32 indices)``, ctx ``None`` (allgather path).
"""
from __future__ import annotations

import math

import torch

from ..argspec import Arg, takes
from . import native_small
from .base import check_finite, register
from .topk import DENSITY, SAMPLE, SAMPLED_MIN_N, SparseCodec, resolve_k, sparse_payload, topk_indices
from .topk_sampled import MIN_SAMPLE, sampled_topk_indices


@register("dgc")
@takes(density=DENSITY, momentum=Arg(float, ge=0, lt=1, help="momentum of the local velocity"),
       momentum_correction=Arg(bool, help="accumulate the velocity, not the gradient"),
       clipping=Arg(bool, help="clip the local gradient's norm"),
       clip_norm=Arg(float, gt=0, help="the norm clipped to"),
       masking=Arg(bool, help="zero the sent coordinates' momentum (factor masking)"),
       warmup=Arg(bool, help="exponential warm-up of the density"),
       warmup_steps=Arg(int, ge=0, help="steps of the warm-up"),
       warmup_stages=Arg(int, ge=0, help="stages of the warm-up"),
       sampled=Arg(bool, help="select by a sampled threshold on large tensors"), sample=SAMPLE)
class DGC(SparseCodec):
    """Deep Gradient Compression: Top-k of a locally accumulated, momentum-corrected gradient,
    with clipping, factor masking and a warm-up of the density (module docstring)."""
    name = "dgc"
    stateful = True
    checks_finite = True  # encode refuses NaN/Inf itself: in the C accumulation's pass, or first

    def __init__(self, density: float = 0.001, momentum: float = 0.9,
                 momentum_correction: bool = True, clipping: bool = False,
                 clip_norm: float = 1.0, masking: bool = True, warmup: bool = True,
                 warmup_steps: int = 100, warmup_stages: int = 4, sampled: bool = True,
                 sample: float = 0.01, seed: int = 0):
        self.density, self.momentum, self.clip_norm = density, momentum, clip_norm
        self.momentum_correction, self.clipping, self.masking = momentum_correction, clipping, masking
        self.warmup, self.warmup_steps, self.warmup_stages = warmup, warmup_steps, warmup_stages
        self.sampled, self.sample = sampled, sample
        self.velocity: dict = {}      # u, per key
        self.accumulated: dict = {}   # v, per key
        self._calls: dict = {}
        self._step: int | None = None
        super().__init__(seed=seed)

    def set_step(self, step: int) -> None:
        """Pin the step the warm-up schedule reads (else: this key's number of calls)."""
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"step must be a non-negative int, got {step!r}")
        self._step = step

    def density_at(self, step: int) -> float:
        """Warm-up schedule: 4^-(s+1) in stage s < warmup_stages, then ``density``."""
        if self.warmup and self.warmup_steps > 0:
            stage = step // self.warmup_steps
            if stage < self.warmup_stages:
                return max(self.density, 0.25 ** (stage + 1))
        return self.density

    def encode_plain(self, x, key):
        # encode's C path (it refuses NaN/Inf itself)
        if x.dim() != 1 or x.requires_grad:
            return None
        return self._encode(x, key, True)

    def encode(self, flat, key):
        return self._encode(flat, key, native_small.plain(flat))

    def _encode(self, flat, key, plain: bool):
        """:meth:`encode` of 1-D ``flat`` (``plain``: a contiguous float32 CPU vector). Speed:
        there (no clipping) one C call first refuses NaN/Inf, then updates u and v in place
        and, where topk_indices would run torch.topk and its order is unique (64 k <= n),
        selects the top k and clears them; the same values as the general route
        (_accumulate, _select)."""
        n = flat.numel()
        u, v = self.velocity.get(key), self.accumulated.get(key)
        if u is None or u.dim() != 1 or u.numel() != n:  # flat is 1-D: u.shape != flat.shape
            u, v = torch.zeros_like(flat), torch.zeros_like(flat)
        step = self._step if self._step is not None else self._calls.get(key, 0)
        k = resolve_k(n, self.density_at(step))
        fast = plain and not self.clipping and native_small.same(u, flat) \
            and native_small.same(v, flat)
        payload = None
        if fast:
            select = 0 < 64 * k <= n and (n <= MIN_SAMPLE if self.sampled else
                                          n < SAMPLED_MIN_N) and native_small.topk_exact()
            vals = native_small.FLOATS.new_empty(k) if select else None
            idx = native_small.INTS.new_empty(k) if select else None
            done = native_small.K.lab_dgc_step(
                flat.data_ptr(), u.data_ptr(), v.data_ptr(), n, self.momentum,
                self.momentum_correction, k if select else 0,
                vals.data_ptr() if select else None, idx.data_ptr() if select else None,
                self.masking and self.momentum_correction)
            if done == 1:
                check_finite(flat, self.name)  # raises: NaN/Inf (nothing was written)
            payload = (vals, idx) if select and done == 0 else None
        else:
            check_finite(flat, self.name)  # what the base class checked before encode
        self._calls[key] = self._calls.get(key, 0) + 1
        if not fast:
            u, v = self._accumulate(flat, u, v)
        if payload is None:
            payload = self._select(v, u, k)
        self.velocity[key], self.accumulated[key] = u, v
        return payload, None

    def _accumulate(self, g, u, v):
        """(u, v) after this gradient, as new tensors: clipping, then momentum correction."""
        if self.clipping and g.numel():
            limit = self.clip_norm / math.sqrt(self.world_size)
            norm = float(torch.linalg.vector_norm(g.float()))
            if norm > limit:
                g = g * (limit / norm)
        if self.momentum_correction:
            u = self.momentum * u + g
            v = v + u
        else:
            v = v + g
        return u, v

    def _select(self, v, u, k: int):
        """The payload of the top ``k`` of ``|v|`` (sampled or exact, as configured); v
        cleared there, and u too with masking."""
        gen = self.generator_for(v.device)
        idx = sampled_topk_indices(v, k, gen, self.sample) if self.sampled \
            else topk_indices(v, k, gen)
        payload = sparse_payload(v, idx)
        v[idx] = 0          # v is the codec's own (v + ...), so this never touches the input
        if self.masking and self.momentum_correction:
            u[idx] = 0
        return payload

    def __repr__(self):
        on = [t for t in ("momentum_correction", "clipping", "masking", "warmup", "sampled")
              if getattr(self, t)]
        return f"DGC(density={self.density}, {'+'.join(on) or 'plain'})"
