"""Count sketch: a random linear summary of a vector that finds its heavy coordinates.

Charikar, Chen, Farach-Colton, "Finding Frequent Items in Data Streams", ICALP 2002; used for
gradients by Ivkin, Rothchild, Ullah, Braverman, Stoica, Arora, "Communication-efficient
Distributed SGD with Sketching", NeurIPS 2019 (Sec. 3). A table of ``rows`` x ``width``
counters; coordinate i adds s_r(i) x_i to cell h_r(i) of every row r, with hash h_r and sign
s_r drawn at random (a table per coordinate) from a seed all ranks share. The sketch is linear, S(a) + S(b) = S(a + b), so the
sketches of all ranks are summed by an allreduce. The estimate of x_i is the median over rows
of s_r(i) S[r, h_r(i)]; coordinates with x_i^2 above a fraction of |x|^2 are found w.h.p.

As a codec (``countsketch``), ``decode`` returns the mean over rows of s_r(i) S[r, h_r(i)]:
unbiased, and linear, so decoding the allreduced sum of sketches gives exactly the sum of the
decodes (the median is more robust but not linear; heavy-hitter recovery with the median and a
second exact round is :mod:`lab.aggregate.sketchsgd`).
"""
from __future__ import annotations

import torch

from ..argspec import Arg, takes
from .base import (Compressor, Part, PayloadError, WireFormat, all_finite, check_finite,
                   register)

#: the sketch's shape: rows x width counters (a table of rows * width float32 per tensor)
ROWS = Arg(int, ge=1, le=64, help="rows of the sketch (hash functions)")
WIDTH = Arg(int, ge=1, le=2 ** 26, help="counters per row")
_FLOAT32_MAX = torch.finfo(torch.float32).max


def random_hash(numel: int, rows: int, buckets: int, seed: int) -> torch.Tensor:
    """(rows, numel) independent uniform draws in [0, buckets) from ``seed``: a fully random
    hash of every coordinate (a table, since coordinates are known in advance)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(buckets, (rows, numel), generator=g, dtype=torch.int64)


class CountSketch:
    """The hashes of a ``rows`` x ``width`` count sketch for vectors of ``numel`` entries."""

    def __init__(self, numel: int, rows: int, width: int, seed: int, device="cpu"):
        ROWS.check(rows, "rows", "CountSketch")
        WIDTH.check(width, "width", "CountSketch")
        h = random_hash(numel, rows, width, seed)
        sign = random_hash(numel, rows, 2, seed + 1) * 2 - 1
        self.rows, self.width, self.numel = rows, width, numel
        # flat cell of (row, h_r(i)) in the rows * width table
        self.cells = (h + torch.arange(rows).unsqueeze(1) * width).to(device)
        self.signs = sign.to(dtype=torch.float32).to(device)

    def sketch(self, x: torch.Tensor) -> torch.Tensor:
        """The (rows, width) table of ``x`` (``numel`` values): linear in ``x``, so the
        tables of several ranks sum to the table of their sum."""
        table = torch.zeros(self.rows * self.width, dtype=x.dtype, device=x.device)
        table.index_add_(0, self.cells.reshape(-1), (self.signs.to(x.dtype) * x).reshape(-1))
        return table.view(self.rows, self.width)

    def votes(self, table: torch.Tensor) -> torch.Tensor:
        """(rows, numel): s_r(i) S[r, h_r(i)], each an unbiased estimate of x_i. A table of
        another size than rows * width (one cut short, or a peer's of another shape) is
        refused with :class:`~lab.compress.wire.PayloadError` naming it."""
        if table.numel() != self.rows * self.width:
            raise PayloadError("countsketch", "table", f"rows * width = {self.rows} * "
                               f"{self.width} = {self.rows * self.width} elements",
                               f"{table.numel()}")
        return table.reshape(-1)[self.cells] * self.signs.to(table.dtype)

    def estimate(self, table: torch.Tensor) -> torch.Tensor:
        """Median over rows of the votes: the count sketch's robust estimate of every x_i."""
        return self.votes(table).median(dim=0).values


def sketch_for(cache: dict, numel: int, rows: int, width: int, seed: int, device) -> CountSketch:
    """The :class:`CountSketch` of ``numel`` values on ``device``, built once and kept in
    ``cache`` (its hash tables cost a pass over ``numel`` random draws)."""
    key = (numel, str(device))
    if key not in cache:
        cache[key] = CountSketch(numel, rows, width, seed, device)
    return cache[key]


@register("countsketch")
@takes(rows=ROWS, width=WIDTH)
class CountSketchCodec(Compressor):
    """A ``rows`` x ``width`` count sketch of the tensor; decodes to the mean of the rows'
    estimates (linear, so allreduce-compatible)."""
    name = "countsketch"
    wire = WireFormat(Part("table", torch.float32, "rows * width"))
    allreduce_compatible = True
    shared_randomness = True
    fixed_size = True
    # encode checks the float32 values it sketches (a float64 input's cast included), in the
    # pass the base class would spend on the input
    checks_finite = True

    def __init__(self, rows: int = 5, width: int = 4096, seed: int = 0):
        self.rows, self.width = rows, width
        self._sketches: dict = {}
        super().__init__(seed=seed)

    def _cs(self, numel, device):
        return sketch_for(self._sketches, numel, self.rows, self.width, self.seed, device)

    def encode(self, flat, key):
        x = flat.float()
        big = 0.0
        if x.numel():
            lo, hi = torch.aminmax(x)
            if not all_finite(lo, hi):
                check_finite(flat, self.name)  # raises if the input itself holds NaN/Inf
                self._overflow(f"|value| up to {flat.detach().abs().max().item():.3g}")
            big = max(-lo.item(), hi.item())
        table = self._cs(flat.numel(), flat.device).sketch(x)
        # a counter sums up to n values: it can overflow only if n * max|x| can
        if big * x.numel() >= _FLOAT32_MAX and not all_finite(*torch.aminmax(table)):
            self._overflow(f"sums of up to {x.numel()} values of |value| up to {big:.3g}")
        return (table,), None

    def _overflow(self, what: str):
        raise OverflowError(f"{self.name}: {what} exceed the float32 range of the sketch's "
                            f"counters ({_FLOAT32_MAX:.5g}); scale the tensor")

    def decode(self, payload, ctx, numel, dtype):
        table = payload[0]
        if numel == 0:
            return table.new_zeros(0, dtype=dtype)
        return self._cs(numel, table.device).votes(table.float()).mean(0).to(dtype=dtype)

    def __repr__(self):
        return f"CountSketchCodec(rows={self.rows}, width={self.width})"
