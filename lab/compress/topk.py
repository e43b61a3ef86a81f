"""Top-k sparsification: keep the k entries of largest magnitude, send (values, indices).

Top-k as a gradient compressor goes back to Strom (Interspeech 2015) and Aji & Heafield
(EMNLP 2017); its convergence with error feedback is analysed by Stich, Cordonnier & Jaggi,
"Sparsified SGD with Memory", NeurIPS 2018 (Definition 2.1, top_k), and Alistarh et al.,
"The Convergence of Sparsified Gradient Methods", NeurIPS 2018. It is biased: use it inside
:class:`~lab.compress.ErrorFeedback` (registered ``"ef"``; ``make("ef", inner="topk")``).

Conventions shared by every sparsifier in this package (helpers below):

- density ``d = k / n`` is the kept fraction, in (0, 1]; ``k = clamp(floor(d * n + 1/2), 1, n)``
  (nearest integer, halves up, at least one element of a non-empty tensor). ``k=`` may be given
  instead of a density and then wins; ``k > n`` raises at compress time.
- payload ``(values, indices)``: values in the input dtype, indices int32 while n < 2**31
  (``lab.compress.packing.index_dtype``), so fp32 costs exactly 8 bytes per kept entry.
- the ctx is ``None``: a peer's payload decodes with one's own ctx (allgather path).
- ties: when several entries share the k-th largest magnitude, which of them are kept is
  unspecified (``torch.topk``'s choice; deterministic for a given input, seed and device).
  The kept magnitudes are always exactly the k largest.

Fast and still exact: on large tensors (n >= 2**17) a threshold is first estimated from a 1%
sample, aimed at about 2k candidates (the hierarchical selection of DGC, Lin et al., ICLR 2018,
Sec. 5); entries with ``|x| >= thr`` are collected (blocks screened by their max and min first)
and ``torch.topk`` runs on those only. If at least k pass, the true top k are all among them
(the k-th largest is >= thr), so the result is exact; if fewer pass (an unlucky sample), a
full ``torch.topk`` runs instead. The sample draws from the codec's generator. That route pays
on CPUs only: on a GPU a single ``torch.topk`` beats its several passes, so it is used there.
"""
from __future__ import annotations

import math

import torch

from ..argspec import Arg, takes
from . import native, native_small
from .base import Compressor, Part, WireFormat, check_finite, register
from .packing import index_dtype
from .wire import min_max, range_error

#: The sparsifiers' arguments (declared once, :mod:`lab.argspec`): the kept fraction, or the
#: kept count instead; the sampled selections' sample fraction and its floor.
DENSITY = Arg(float, gt=0, le=1, help="kept fraction k/n")
KEPT = Arg(int, ge=1, none=True, help="values kept (wins over density)")
SAMPLE = Arg(float, gt=0, le=1, help="fraction of the values sampled to estimate a threshold")
LEAST_SAMPLE = Arg(int, ge=1, le=2 ** 24, help="values sampled at least")


def check_density(density: float, k: int | None, owner: str = "") -> None:
    """Validate ``density`` in (0, 1] and an optional positive int ``k`` (:data:`DENSITY`,
    :data:`KEPT`), for callers that are not declared factories themselves."""
    if KEPT.check(k, "k", owner) is None:
        DENSITY.check(density, "density", owner)


def resolve_k(n: int, density: float, k: int | None = None) -> int:
    """Number of kept entries for a tensor of ``n`` elements (0 only when ``n == 0``)."""
    if k is not None:
        if k > n and n > 0:
            raise ValueError(f"k={k} exceeds the tensor's {n} elements")
        return min(k, n)
    if n == 0:
        return 0
    return min(n, max(1, math.floor(density * n + 0.5)))


SAMPLED_MIN_N = 2 ** 17  # below this a plain torch.topk is as fast as the sampled route


def sampled_threshold(x: torch.Tensor, frac: float, sample: float, generator: torch.Generator,
                      min_sample: int = 1000) -> torch.Tensor:
    """Estimate the magnitude above which a fraction ``frac`` of ``|x|`` lies, from a sample
    of ``max(min_sample, sample * n)`` positions drawn with replacement (exact if that is n)."""
    n = x.numel()
    s = min(n, max(min_sample, math.ceil(sample * n)))
    if s == n:
        picked = x.abs()
    else:
        picked = x[torch.randint(n, (s,), generator=generator, device=x.device)].abs()
    ks = min(s, max(1, round(frac * s)))  # round, not ceil: 1 - 0.99 is 0.01000...0009
    return torch.topk(picked, ks, sorted=False).values.min()


def candidates(x: torch.Tensor, thr: torch.Tensor, frac: float) -> torch.Tensor:
    """Ascending indices i with ``|x_i| >= thr``, where about a fraction ``frac`` passes.

    When few pass, screen blocks of L entries first with a max and a min per block (two cheap
    reductions, no |x| temporary), so the element-wise test only runs on the ~12% of blocks
    that hold a candidate: 2-3x faster than ``where(|x| >= thr)`` at frac = 0.2%."""
    n = x.numel()
    L = 2 ** math.floor(math.log2(0.125 / frac)) if frac > 0 else 128
    if L < 16 or n < 64 * L:
        return torch.where(x.abs() >= thr)[0]
    L = min(L, 128)
    nb = n // L
    head = x[: nb * L].view(nb, L)
    blocks = torch.where((head.amax(1) >= thr) | (head.amin(1) <= -thr))[0]
    row, col = torch.where(head[blocks].abs() >= thr)
    found = blocks[row] * L + col
    rest = torch.where(x[nb * L:].abs() >= thr)[0]
    return torch.cat([found, rest + nb * L]) if rest.numel() else found


def candidates_topk(x: torch.Tensor, k: int, thr: torch.Tensor, frac: float) -> torch.Tensor:
    """Entries with ``|x| >= thr``, cut to the k largest among them when more pass."""
    cand = candidates(x, thr, frac)
    if cand.numel() > k:
        cand = cand[torch.topk(x[cand].abs(), k, sorted=False).indices]
    return cand


def topk_indices(x: torch.Tensor, k: int, generator: torch.Generator | None = None,
                 overshoot: float = 2.0, sample: float = 0.01) -> torch.Tensor:
    """Indices of the k entries of largest ``|x|`` (1-D), unsorted; exact.

    With a ``generator`` and a large tensor, the sampled-threshold route of the module
    docstring (exact whenever at least k candidates pass, else a full ``torch.topk``)."""
    n = x.numel()
    if k >= n:
        return torch.arange(n, device=x.device)
    # the sampled route pays on CPUs (3-15x); on a GPU torch.topk is faster than its passes
    if generator is not None and n >= SAMPLED_MIN_N and x.is_cpu:
        frac = overshoot * k / n
        cand = candidates_topk(x, k, sampled_threshold(x, frac, sample, generator), frac)
        if cand.numel() == k:
            return cand
    return torch.topk(x.abs(), k, sorted=False).indices


def sparse_payload(flat: torch.Tensor, idx: torch.Tensor, values: torch.Tensor | None = None):
    """``(values, int32 indices)`` for the entries ``idx`` of ``flat`` (1-D int64)."""
    vals = flat.index_select(0, idx) if values is None else values  # flat[idx]: ~2 us more
    return vals, idx.to(dtype=index_dtype(flat.numel()))


#: (values, indices) with a data-dependent count ``c``: every index in [0, n)
RAGGED = WireFormat(Part("values", "input", "c"), Part("indices", "index", "c", "0..n - 1"),
                    counts={"c": "0..n"})
#: (values, indices) with exactly k of each
EXACT_K = WireFormat(Part("values", "input", "k"), Part("indices", "index", "k", "0..n - 1"),
                     where={"k": "floor(density * n + 1/2) clamped to [1, n], or k given"})


class SparseCodec(Compressor):
    """Base of (values, indices) codecs: decode scatters the values into zeros. ``wire``:
    a data-dependent count of entries unless a subclass fixes it (``EXACT_K``)."""

    wire = RAGGED
    decode_checks = ("indices",)  # checked in the scatter's own pass (:meth:`decode`)

    def wire_vars(self, numel, ctx, payload):
        k = getattr(self, "k", None)
        return {"k": resolve_k(numel, getattr(self, "density", 1.0), min(k, numel) if k else k)}

    def decode(self, payload, ctx, numel, dtype):
        """Scatter the values into zeros; every index is checked against ``0..n - 1`` first
        (on the CPU, in the C scatter's own pass: ``lab_scatter_into``, which zeroes the
        output too, else :func:`~lab.compress.native.scatter`)."""
        values, idx = payload[0], payload[1]
        if (dtype is torch.float32 and values.dtype is torch.float32 and idx.dtype is torch.int32
                and values.is_contiguous() and idx.is_contiguous() and native.enabled(values)):
            if native_small.enabled(values) and values.numel() == idx.numel():
                out = native_small.FLOATS.new_empty(numel)  # zeroed and scattered: one C call
                if not native_small.K.lab_scatter_into(values.data_ptr(), idx.data_ptr(), 0,
                                                       idx.numel(), numel, out.data_ptr()):
                    return out
                raise range_error(self.name, RAGGED.parts[1], numel, idx)
            out = native.scatter(values, idx, numel)  # torch.zeros, then one C pass
            if out is None:
                raise range_error(self.name, RAGGED.parts[1], numel, idx)
            return out
        out = torch.zeros(numel, dtype=dtype, device=values.device)
        if idx.numel():
            lo, hi = min_max(idx)
            if lo < 0 or hi >= numel:
                raise range_error(self.name, RAGGED.parts[1], numel, idx)
            out[idx.long()] = values.to(dtype=dtype)
        return out


@register("topk")
@takes(density=DENSITY, k=KEPT)
class TopK(SparseCodec):
    """Exact Top-k by magnitude (``density`` or ``k``; see the module docstring)."""
    fixed_size = True

    name = "topk"
    wire = EXACT_K
    # on the plain torch.topk route the k largest |x| are checked instead of the whole input
    # (torch.topk ranks NaN above every number, and Inf is the largest |x|: a non-finite input
    # is always among them); the other routes check the input (:meth:`encode`)
    checks_finite = True

    def __init__(self, density: float = 0.01, k: int | None = None, seed: int = 0):
        self.density, self.k = density, k
        super().__init__(seed=seed)

    def encode_plain(self, x, key):
        payload = self._encode_small(x) if x.dim() == 1 else None
        return None if payload is None else (payload, None)

    def _encode_small(self, flat):
        """The plain route's payload (below) for a plain 1-D float32 ``flat`` in one C pass,
        in torch.topk's order, where torch sorts (64 k <= n) and its order is unique; None
        otherwise (another k, NaN/Inf, a tie among the k + 1 largest |x|)."""
        n = flat.numel()
        k = resolve_k(n, self.density, self.k)
        if 0 < 64 * k <= n < SAMPLED_MIN_N and native_small.topk_exact():
            return native_small.topk(flat, k)
        return None

    def encode(self, flat, key):
        n = flat.numel()
        k = resolve_k(n, self.density, self.k)
        if 0 < k < n and n < SAMPLED_MIN_N and flat.is_cpu:  # topk_indices' plain route
            if native_small.plain(flat):
                payload = self._encode_small(flat)  # torch.topk's order, one C pass
                if payload is not None:  # else NaN/Inf (raised below), a tie, a larger k
                    return payload, None
            top = torch.topk(flat.abs(), k, sorted=False)
            if not math.isfinite(top.values.max().item()):  # max propagates NaN
                check_finite(flat, self.name)  # raises: NaN or Inf in the input
            return sparse_payload(flat, top.indices), None
        check_finite(flat, self.name)
        idx = topk_indices(flat, k, self.generator_for(flat.device))
        return sparse_payload(flat, idx), None

    def __repr__(self):
        arg = f"k={self.k}" if self.k is not None else f"density={self.density}"
        return f"TopK({arg})"
