"""DeMo: decoupled momentum; only the momentum's fast components, found by a chunked DCT, move.

Peng, Quesnelle, Kingma, "DeMo: Decoupled Momentum Optimization", arXiv 2411.19870 (2024),
Algorithm 1. On every rank, with local gradient g and local momentum m (starting at zero):

    m <- beta m + g                         (accumulate)
    q <- ExtractFastComponents(m, s, k)     (DCT of chunks of s values, top-k |coef| per chunk)
    m <- m - q                              (what was extracted leaves the momentum)
    Q <- Synchronize(q)                     (allgather of every rank's k values and indices
                                             per chunk; the mean of their inverse DCTs)
    theta <- theta - lr Q                   (the paper's signum variant: lr sign(Q))

This aggregator returns Q (or sign(Q), ``sign=True``, as the authors' experiments do); the
config's optimizer must then be plain SGD without momentum, since the momentum lives here.
With k = s and no sign every coefficient is extracted, m is zeroed each step, and DeMo is
plain SGD on the averaged gradient (the residual momentum is what makes it differ).

Per step a rank sends ceil(n / s) k (4 + 2) bytes: float32 values and int16 indices within a
chunk. Deviations: the parameters are laid end to end and cut into 1-D chunks of s values
(the last one zero-padded), with an orthonormal DCT-II, where the reference code chunks each
tensor in 2-D (s x s blocks); values travel in float32. The reference implementation
(bloc97/DeMo) was read for understanding only.
"""
from __future__ import annotations

import math

import torch

from ..argspec import Arg, takes
from .base import FACTOR, LAYERWISE, Aggregator, register


def dct_matrix(s: int) -> torch.Tensor:
    """The orthonormal DCT-II matrix D (s x s): coefficients c = D x, inverse x = D^T c."""
    n = torch.arange(s, dtype=torch.float64)
    d = torch.cos(math.pi / s * (n[None, :] + 0.5) * n[:, None]) * math.sqrt(2 / s)
    d[0] /= math.sqrt(2)
    return d.float()


@register("demo")
@takes(chunk=Arg(int, ge=4, le=4096, help="DCT chunk size (s)"),
       k=Arg(int, ge=1, help="coefficients kept per chunk"),
       beta=FACTOR, sign=Arg(bool, help="apply sign(Q) (the paper's signum variant)"),
       layerwise=LAYERWISE,
       rule=lambda a: f"k ({a['k']}) must be <= chunk ({a['chunk']})"
       if a["k"] > a["chunk"] else None)
class DeMo(Aggregator):
    name = "demo"

    def __init__(self, comm, chunk: int = 64, k: int = 4, beta: float = 0.999,
                 sign: bool = True, layerwise: bool = False):
        super().__init__(comm, None, layerwise)
        self.chunk, self.k, self.beta, self.sign = chunk, k, float(beta), sign
        self.momentum: dict = {}
        self._dct = dct_matrix(chunk)

    @classmethod
    def check_config(cls, cfg):
        if cfg.optimizer != "sgd" or cfg.momentum:
            raise ValueError(f"aggregator='demo' keeps the momentum itself: use optimizer='sgd' "
                             f"with momentum=0, got optimizer={cfg.optimizer!r}, "
                             f"momentum={cfg.momentum}")

    def payload_bytes(self, numel: int) -> int:
        """Bytes one rank sends per step for ``numel`` values (values float32, indices int16)."""
        return -(-numel // self.chunk) * self.k * (4 + 2)

    @torch.no_grad()
    def reduce(self, tensor, key, step):
        if not torch.isfinite(tensor).all():
            raise FloatingPointError(f"demo: non-finite gradient (key {key!r})")
        n, s = tensor.numel(), self.chunk
        m = self.momentum.get(key)
        if m is None or m.numel() != n:
            m = torch.zeros(n, dtype=torch.float32, device=tensor.device)
        m = self.beta * m + tensor.reshape(-1).float()
        rows = -(-n // s)
        padded = torch.cat([m, m.new_zeros(rows * s - n)]).view(rows, s)
        dct = self._dct.to(m.device)
        coef = padded @ dct.T                                     # c = D x, per chunk
        idx = coef.abs().topk(self.k, dim=1).indices             # fast components per chunk
        vals = coef.gather(1, idx)
        q = (torch.zeros_like(coef).scatter_(1, idx, vals) @ dct).reshape(-1)[:n]
        self.momentum[key] = m - q
        total = torch.zeros(rows, s, dtype=torch.float32, device=m.device)
        for v, i in self.comm.allgather_payload((vals.reshape(-1), idx.to(torch.int16).reshape(-1)),
                                                tag="demo", same_size=True):
            total.scatter_add_(1, i.long().view(rows, self.k), v.view(rows, self.k))
        out = (total @ dct).reshape(-1)[:n].div_(self.comm.world_size)
        return (out.sign() if self.sign else out).view_as(tensor).to(tensor.dtype)
