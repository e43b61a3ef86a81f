"""PowerSGD: rank-r compression by one step of (warm-started) power iteration.

Vogels, Karimireddy, Jaggi, "PowerSGD: Practical Low-Rank Gradient Compression for Distributed
Optimization", NeurIPS 2019, Algorithm 1 (compression) inside Algorithm 2 (error feedback).
Each gradient tensor of two or more dimensions is viewed as a matrix M (n x m, the first
dimension against the rest); with the previous step's Q (m x r):

    P = M Q,   P <- allreduce(P),   P^ = orthogonalize(P),
    Q = M^T P^,   Q <- allreduce(Q) / W,   M ~ P^ Q^T                     (Alg. 1)

Both products are linear in M, so summing P and Q over ranks gives the factors of the summed
gradient: the scheme is allreduce-compatible and a rank sends (n + m) r numbers per matrix
whatever the world size W. Tensors of one dimension, and matrices too small to gain at least
``min_compression_rate`` (torch's rule), are summed uncompressed. Q is kept for the next step
(warm start) and orthogonalized before use, as PyTorch's ``powerSGD_hook`` does (the same span,
better conditioned). Error feedback (Alg. 2): e <- M - P^ Q^T with M = g + e, the local input
minus the shared approximation (our reading; the paper's local P^ Q_w^T gives the same sum of
errors over ranks, hence the same updates).

Without warm start (``warm_start=False``), Algorithm 1 draws Q afresh from a standard Gaussian
at every step. All ranks must use the same Q (else the summed P's and Q's mean nothing), so the
draw comes from a generator seeded by (``seed``, the tensor list's key, the step number): new
at every step, equal on every rank, and independent of call order or restarts. Torch's hook
also draws a new, shared Q each step, but seeds it from one ``numpy.random.RandomState(
random_seed)`` stream advanced bucket after bucket; the numbers therefore differ from ours
(same distribution). With warm start both seed only the first Q's (ours: ``seed`` itself).

Departures from torch's hook, on purpose: a zero column of P (an all-zero gradient) is left at
zero instead of divided by zero, and a zero column of the new Q keeps the previous one, so the
warm start survives a step of zero gradients; all exchanges are synchronous and ordered, so any
number of DDP buckets works on gloo (see :mod:`lab.hooks.powersgd`).
"""
from __future__ import annotations

import hashlib

import torch

from ..argspec import SEED, Arg, takes
from ..comm import Collective
from ..compress.base import check_finite
from .base import LAYERWISE, Aggregator, register

#: PowerSGD's arguments, shared by the aggregator and the DDP hook (``lab.hooks``)
POWER = dict(rank=Arg(int, ge=1, le=2 ** 16, help="rank of the approximation"),
             warm_start=Arg(bool, help="start each step's power iteration from the last Q"),
             error_feedback=Arg(bool, help="keep the approximation's error for the next step"),
             min_compression_rate=Arg(float, gt=0, help="compress a matrix only if it saves "
                                                        "this factor"),
             seed=SEED)


def orthogonalize(m: torch.Tensor) -> torch.Tensor:
    """Gram-Schmidt on the columns of ``m`` (n x r) in place; a zero column stays zero."""
    tiny = torch.finfo(m.dtype).tiny
    for i in range(m.shape[1]):
        col = m[:, i:i + 1]
        col /= col.norm().clamp_min(tiny)  # 0 / tiny = 0: no NaN from an all-zero gradient
        if i + 1 < m.shape[1]:
            rest = m[:, i + 1:]
            rest -= col @ (col.T @ rest)
    return m


def should_compress(n: int, m: int, rank: int, min_rate: float) -> bool:
    """Compress an n x m matrix only if (n + m) r numbers save a factor ``min_rate``."""
    return (n + m) * rank * min_rate < n * m


@takes(**POWER, start_iter=Arg(int, ge=0, help="plain allreduce steps first"))
class PowerSGD:
    """The state and step of PowerSGD over a list of tensors (one list per ``key``).

    ``step(tensors, key)`` returns the estimate of the mean over ranks of each tensor, using
    three allreduces on ``comm`` (uncompressed tensors, all P's, all Q's: tags ``powersgd:dense``,
    ``powersgd:P``, ``powersgd:Q``). ``start_iter`` plain allreduce steps come first (torch's
    ``start_powerSGD_iter``). Initial Q's are standard normal from a generator seeded with
    ``seed``, drawn matrix by matrix, so every rank starts from the same Q; without warm start
    each step's Q's come from a seed derived from (``seed``, ``key``, step), as above.
    """

    def __init__(self, comm: Collective, rank: int = 2, warm_start: bool = True,
                 error_feedback: bool = True, min_compression_rate: float = 2.0,
                 start_iter: int = 0, seed: int = 0):
        self.comm = comm
        self.rank, self.start_iter, self.seed = rank, start_iter, seed
        self.warm_start, self.error_feedback = bool(warm_start), bool(error_feedback)
        self.min_rate = float(min_compression_rate)
        self.q: dict = {}        # key -> list of Q (m x r), one per compressed matrix
        self.errors: dict = {}   # key -> list of e (n x m)
        self.iters: dict = {}    # key -> steps done

    def _layout(self, tensors):
        """Which tensors are compressed, as (index, n, m, r)."""
        out = []
        for i, t in enumerate(tensors):
            if t.dim() < 2:
                continue
            n, m = t.shape[0], t[0].numel()
            r = min(n, m, self.rank)
            if should_compress(n, m, r, self.min_rate):
                out.append((i, n, m, r))
        return out

    def _step_seed(self, key, it: int) -> int:
        """A 32-bit seed for step ``it`` of ``key``, the same on every rank. Hashed, not added:
        torch's CPU generator keeps only the low 32 bits of a seed, and nearby seeds must not
        share draws (``hash`` of a str differs between processes, blake2b does not)."""
        text = f"{self.seed}:{key!r}:{it}".encode()
        return int.from_bytes(hashlib.blake2b(text, digest_size=4).digest(), "little")

    def _initial_q(self, layout, device, dtype, seed=None):
        g = torch.Generator().manual_seed(self.seed if seed is None else seed)
        return [orthogonalize(torch.randn(m, r, generator=g, dtype=dtype).to(device))
                for _, _, m, r in layout]

    def _allreduce(self, parts: list[torch.Tensor], tag: str) -> list[torch.Tensor]:
        """Sum the parts over ranks in one call (laid end to end)."""
        if not parts:
            return []
        flat = torch.cat([p.reshape(-1) for p in parts])
        self.comm.allreduce(flat, tag=tag)
        return [f.view_as(p) for f, p in zip(flat.split([p.numel() for p in parts]), parts)]

    def step(self, tensors: list[torch.Tensor], key=0) -> list[torch.Tensor]:
        for t in tensors:
            check_finite(t, "powersgd")
        world = self.comm.world_size
        it = self.iters.get(key, 0)
        self.iters[key] = it + 1
        if it < self.start_iter:
            return [t / world for t in self._allreduce([t.detach().clone() for t in tensors], "powersgd:dense")]
        layout = self._layout(tensors)
        chosen = {i for i, *_ in layout}
        out = [None] * len(tensors)
        dense = [i for i in range(len(tensors)) if i not in chosen]
        for i, s in zip(dense, self._allreduce([tensors[i].detach().clone() for i in dense], "powersgd:dense")):
            out[i] = s / world
        if not layout:
            return out
        shapes = [(n, m, r) for _, n, m, r in layout]
        mats = [tensors[i].detach().reshape(n, m).float() for i, n, m, _ in layout]
        if self.error_feedback:
            errs = self.errors.get(key)
            if errs is not None and [e.shape for e in errs] == [x.shape for x in mats]:
                mats = [x + e for x, e in zip(mats, errs)]
        qs = self.q.get(key)
        if not self.warm_start:  # Alg. 1 without warm start: a new Gaussian Q at every step
            qs = self._initial_q(layout, mats[0].device, torch.float32, self._step_seed(key, it))
        elif qs is None or [q.shape for q in qs] != [(m, r) for _, m, r in shapes]:
            qs = self._initial_q(layout, mats[0].device, torch.float32)
        else:
            qs = [orthogonalize(q.clone()) for q in qs]
        ps = self._allreduce([x @ q for x, q in zip(mats, qs)], "powersgd:P")
        ps = [orthogonalize(p) for p in ps]
        new_q = self._allreduce([x.T @ p for x, p in zip(mats, ps)], "powersgd:Q")
        new_q = [q / world for q in new_q]
        approx = [p @ q.T for p, q in zip(ps, new_q)]
        if self.error_feedback:
            self.errors[key] = [x - a for x, a in zip(mats, approx)]
        # a zero column of Q (zero gradient) would freeze the warm start at zero: keep the old one
        self.q[key] = [torch.where(q.norm(dim=0, keepdim=True) > 0, q, old)
                       for q, old in zip(new_q, qs)]
        for (i, *_), a in zip(layout, approx):
            out[i] = a.view_as(tensors[i]).to(tensors[i].dtype)
        return out


@register("powersgd")
@takes(**POWER, layerwise=LAYERWISE)
class PowerSGDAggregator(Aggregator):
    """PowerSGD on the model's tensors (``rank``, ``warm_start``, ``error_feedback``,
    ``min_compression_rate``, ``seed``); always per layer, as the paper prescribes."""

    name = "powersgd"

    def __init__(self, comm, rank: int = 2, warm_start: bool = True, error_feedback: bool = True,
                 min_compression_rate: float = 2.0, seed: int = 0, layerwise: bool = True):
        super().__init__(comm, None, layerwise)
        self.power = PowerSGD(comm, rank=rank, warm_start=warm_start, error_feedback=error_feedback,
                              min_compression_rate=min_compression_rate, seed=seed)

    def aggregate(self, grads, step):
        return self.power.step(list(grads), key="model")
