"""ZipML: quantisation points fitted to the data, then unbiased stochastic rounding.

Zhang, Li, Kara, Alistarh, Liu, Zhang, "ZipML: Training Linear Models with End-to-End Low
Precision, and a Little Bit of Deep Learning", ICML 2017 (variance-optimal quantisation
points). Rounding x stochastically between adjacent points a <= x <= b (up with probability
(x - a)/(b - a)) is unbiased with variance (b - x)(x - a); ZipML picks the K points that
minimise the total variance sum_x (b(x) - x)(x - a(x)) over the data by dynamic programming.

Here the points are restricted to M candidates (data values at evenly spaced ranks, so the
minimum and the maximum are always candidates and every value can be rounded without bias),
and the DP over candidates costs O(M^2 K):

    V[k][j] = min_{i<j} V[k-1][i] + cost(i, j),
    cost(i, j) = sum_{c_i <= x < c_j} (c_j - x)(x - c_i)   (from prefix sums of 1, x, x^2)

Wire: the K points (float32) and ceil(n log2(K) / 8) bytes of packed point indices.
"""
from __future__ import annotations

import torch

from ..argspec import Arg, takes
from .base import Compressor, Part, PayloadError, WireFormat, bernoulli, register
from .packing import pack_uint, unpack_uint


def optimal_points(x: torch.Tensor, levels: int, candidates: int) -> torch.Tensor:
    """Variance-optimal quantisation points (float32, sorted, <= ``levels`` of them) for ``x``."""
    xs = x.double().sort().values
    n = xs.numel()
    ranks = torch.linspace(0, n - 1, min(candidates, n), dtype=torch.float64).round().long()
    c = torch.unique(xs[ranks])  # sorted, includes min and max
    m = c.numel()
    if m <= levels:
        return c.float()
    # prefix sums of count, x, x^2 up to each candidate (values strictly below it)
    at = torch.searchsorted(xs, c, right=False)
    zero = xs.new_zeros(1)
    p0 = at.double()
    p1 = torch.cat([zero, xs.cumsum(0)])[at]
    p2 = torch.cat([zero, (xs * xs).cumsum(0)])[at]
    s0, s1, s2 = (p[None, :] - p[:, None] for p in (p0, p1, p2))  # sums over [c_i, c_j)
    ci, cj = c[:, None], c[None, :]
    cost = (-s2 + (ci + cj) * s1 - ci * cj * s0).clamp(min=0)
    cost = torch.where(torch.ones(m, m, dtype=torch.bool).triu(1), cost, torch.inf)
    best = torch.full((m,), torch.inf, dtype=torch.float64)
    best[0] = 0.0  # one point (the minimum) covers [c_0, c_0]
    back = []
    for _ in range(levels - 1):
        total = best[:, None] + cost           # (from i, to j)
        best, arg = total.min(dim=0)
        back.append(arg)
    idx = [m - 1]                              # the maximum is the last point
    for arg in reversed(back):
        idx.append(int(arg[idx[-1]]))
    return c[torch.tensor(idx[::-1])].float()


def round_to_points(x: torch.Tensor, points: torch.Tensor, generator) -> torch.Tensor:
    """Unbiased stochastic rounding of float32 ``x`` onto sorted ``points``: int64 indices."""
    if points.numel() == 1:
        return torch.zeros(x.numel(), dtype=torch.int64, device=x.device)
    lo = (torch.searchsorted(points, x, right=True) - 1).clamp(0, points.numel() - 2)
    a, b = points[lo], points[lo + 1]
    p = ((x - a) / (b - a)).clamp(0, 1)
    return lo + bernoulli(p, generator)  # up with probability (x - a) / (b - a)


@register("zipml")
@takes(levels=Arg(int, ge=2, le=2 ** 16, help="quantization points"),
       candidates=Arg(int, ge=2, le=2 ** 16, help="values the points are chosen from"))
class ZipML(Compressor):
    """Data-optimal ``levels`` points (chosen from ``candidates``), stochastic rounding."""

    name = "zipml"
    wire = WireFormat(Part("points", torch.float32, "min(n, 1)..levels", "finite"),
                      Part("codes", torch.uint8, "ceil(n * bits / 8)"),
                      where={"bits": "ceil(log2(levels))"},
                      note="every code < the number of points (checked where fewer than 2^bits)")

    def __init__(self, levels: int = 16, candidates: int = 128, seed: int = 0):
        self.levels, self.candidates = levels, candidates
        self.bits = (levels - 1).bit_length()  # ceil(log2(levels))
        super().__init__(seed=seed)

    def encode(self, flat, key):
        x = flat.float()
        if not x.numel():
            return (x.new_zeros(0), pack_uint(x.new_zeros(0, dtype=torch.int64), self.bits)), None
        points = optimal_points(x.cpu(), self.levels, self.candidates).to(x.device)
        codes = round_to_points(x, points, self.generator_for(x.device))
        return (points, pack_uint(codes, self.bits)), None

    checks_in_decode = True  # codes against the points sent

    def decode(self, payload, ctx, numel, dtype):
        points, packed = payload
        if not numel:
            return points.new_zeros(0, dtype=dtype)
        codes = unpack_uint(packed, numel, self.bits, torch.int32)
        if points.numel() < 2 ** self.bits:  # a code could address past the points: check
            top = int(codes.max())
            if top >= points.numel():
                raise PayloadError(self.name, "codes", f"codes < {points.numel()} (the points)",
                                   f"code {top}")
        return points.float()[codes].to(dtype=dtype)

    def __repr__(self):
        return f"ZipML(levels={self.levels}, candidates={self.candidates})"
