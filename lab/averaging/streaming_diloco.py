"""Streaming DiLoCo: DiLoCo by fragments, on a staggered schedule, with a delayed merge and
outer gradients sent in low precision.

Douillard, Donchev, Rush, Kale, Charles, Garrett, Teston, Lacey, McIlroy, Shen, Ramé, Szlam,
Ranzato, Barham, "Streaming DiLoCo with overlapping communication: Towards a Distributed Free
Lunch", arXiv 2501.18512 (2025), Algorithm 2 (our reading). The parameters are cut into P
fragments; fragment p takes its outer step every H inner steps like DiLoCo
(:mod:`lab.averaging.diloco`), but shifted by p H / P steps, so a step sends at most one
fragment and the peak bandwidth falls by P. Fragment p's outer gradient is compressed by
``codec`` (the paper: 4-bit floats), exchanged, averaged and applied by the outer optimizer
to the global fragment theta_p; the workers meanwhile go on for ``tau`` inner steps, after which
they merge:

    theta_{i,p} <- alpha theta_{i,p} + (1 - alpha) theta_p           (mixing factor alpha)

With one fragment, tau = 0, alpha = 0 and a lossless codec this is DiLoCo step for step.

Deviations: fragments are P equal contiguous slices of the parameters laid end to end (the
paper groups whole transformer blocks, strided); the exchange is issued at step t and booked
there, and the merge waits tau steps, so the *algorithm* is the overlapped one but the wall
clock here does not overlap the exchange with the tau steps (bytes and peak bandwidth are
exact; a step time on a slow link is the non-overlapped one, an upper bound). The codecs are
``lab.compress``'s (``codec_bits``: the codec's ``bits=``): the book uses ``qsgd`` with 3 bits (a sign and 3-bit level: 4 bits per
value, plus a norm per bucket), stochastic and unbiased, where the paper rounds to FP4 E3M0.
At the end the model is the global theta (each fragment at its last outer step).
"""
from __future__ import annotations

import torch

from .. import compress
from ..argspec import Arg, takes
from .base import Averaging, register
from .diloco import OUTER, OuterSGD
from .params import flat, load


@register("streaming_diloco")
@takes(**OUTER, fragments=Arg(int, ge=1, help="fragments of the model (P)"),
       tau=Arg(int, ge=0, help="inner steps before an exchanged fragment is merged"),
       alpha=Arg(float, ge=0, le=1, help="mixing factor: weight of the local fragment"),
       codec=Arg(str, help="lab.compress codec of the outer gradients"),
       codec_bits=Arg(int, ge=1, le=16, none=True, help="the codec's bits= (qsgd, ...)"),
       rule=lambda a: f"tau ({a['tau']}) must be < period ({a['period']})"
       if a["tau"] >= a["period"] else None)
class StreamingDiLoCo(Averaging):
    name = "streaming_diloco"

    def __init__(self, engine, period: int = 50, outer_lr: float = 0.7,
                 outer_momentum: float = 0.9, nesterov: bool = True, fragments: int = 4,
                 tau: int = 0, alpha: float = 0.5, codec: str = "none",
                 codec_bits: int | None = None):
        super().__init__(engine)
        self.period, self.tau, self.alpha = period, tau, alpha
        self.theta = flat(engine.params)
        n = self.theta.numel()
        if fragments > n:
            raise ValueError(f"streaming_diloco: fragments ({fragments}) exceeds the model's "
                             f"{n} parameters")
        bounds = [n * p // fragments for p in range(fragments + 1)]
        self.bounds = bounds
        self.outer = OuterSGD(n, outer_lr, outer_momentum, nesterov)
        self.codec = self.make_codec(codec, codec_bits).bind(engine.rank, engine.world_size)
        self.pending: list = []  # [step after which to merge, fragment]

    @staticmethod
    def make_codec(codec: str, bits: int | None):
        """The outer gradients' codec, its errors said of ``codec``/``codec_bits``."""
        try:
            return compress.make(codec, **({} if bits is None else {"bits": bits}))
        except (TypeError, ValueError) as err:
            raise ValueError(f"streaming_diloco: codec={codec!r}, codec_bits={bits!r}: "
                             f"{err}") from err

    @classmethod
    def check_config(cls, cfg):
        kw = cfg.averaging_kw  # before any process starts
        cls.make_codec(kw.get("codec", "none"), kw.get("codec_bits"))

    def exchange_gradients(self, step):
        return False

    def fragment(self, p: int) -> slice:
        return slice(self.bounds[p], self.bounds[p + 1])

    def due(self, step: int) -> list[int]:
        """Fragments whose outer step follows ``step`` (0-based): fragment p after the steps
        t with t + 1 + p H / P divisible by H."""
        P = len(self.bounds) - 1
        return [p for p in range(P) if (step + 1 + p * self.period // P) % self.period == 0]

    @torch.no_grad()
    def exchange(self, delta: torch.Tensor, p: int) -> torch.Tensor:
        """The mean over ranks of ``delta`` (fragment p's outer gradient) through the codec."""
        c, comm = self.codec, self.engine.comm
        payload, ctx = c.compress(delta, key=f"fragment{p}")
        if c.allreduce_compatible:
            total = c.decompress(comm.allreduce_payload(payload, tag="outer"), ctx)
        else:
            total = torch.zeros_like(delta)
            for got in comm.allgather_payload(payload, tag="outer", same_size=c.fixed_size):
                total += c.decompress(got, ctx)
        return total.div_(comm.world_size)

    @torch.no_grad()
    def after_step(self, step):
        e = self.engine
        local = None
        sent = self.due(step)
        for p in sent:
            local = flat(e.params) if local is None else local
            sl = self.fragment(p)
            delta = self.theta[sl] - local[sl]
            if not torch.isfinite(delta).all():
                raise FloatingPointError(f"rank {e.rank}: non-finite fragment {p} before its "
                                         f"outer step")
            self.outer.step(self.theta, self.exchange(delta, p), sl)
            self.pending.append([step + self.tau, p])
        ready = [p for at, p in self.pending if at == step]
        if ready:
            v = flat(e.params)
            for p in ready:
                sl = self.fragment(p)
                v[sl] = self.alpha * v[sl] + (1 - self.alpha) * self.theta[sl]
            load(e.params, v)
            self.pending = [[at, p] for at, p in self.pending if at != step]
        return {"fragments_sent": float(len(sent))}

    def finish(self):
        load(self.engine.params, self.theta)
