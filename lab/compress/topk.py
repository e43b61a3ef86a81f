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
  (:func:`~lab.compress.packing.index_dtype`), so fp32 costs exactly 8 bytes per kept entry.
- the ctx is ``None``: a peer's payload decodes with one's own ctx (allgather path).
- ties: when several entries share the k-th largest magnitude, which of them are kept is
  ``torch.topk``'s choice (deterministic for a given input and device, but unspecified).
  Either way the kept magnitudes are exactly the k largest.
"""
from __future__ import annotations

import math

import torch

from .base import Compressor, register
from .packing import index_dtype


def check_density(density: float, k: int | None) -> None:
    """Validate ``density`` in (0, 1] and an optional positive int ``k``."""
    if k is not None:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be a positive int, got {k!r}")
        return
    if isinstance(density, bool) or not isinstance(density, (int, float)) \
            or not 0 < density <= 1:
        raise ValueError(f"density must be in (0, 1], got {density!r}")


def resolve_k(n: int, density: float, k: int | None = None) -> int:
    """Number of kept entries for a tensor of ``n`` elements (0 only when ``n == 0``)."""
    if k is not None:
        if k > n and n > 0:
            raise ValueError(f"k={k} exceeds the tensor's {n} elements")
        return min(k, n)
    if n == 0:
        return 0
    return min(n, max(1, math.floor(density * n + 0.5)))


def topk_indices(mag: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the k largest entries of ``mag`` (a non-negative 1-D tensor), unsorted."""
    if k >= mag.numel():
        return torch.arange(mag.numel(), device=mag.device)
    return torch.topk(mag, k, sorted=False).indices


def sparse_payload(flat: torch.Tensor, idx: torch.Tensor, values: torch.Tensor | None = None):
    """``(values, int32 indices)`` for the entries ``idx`` of ``flat``."""
    vals = flat[idx] if values is None else values
    return vals, idx.to(index_dtype(flat.numel()))


class SparseCodec(Compressor):
    """Base of (values, indices) codecs: decode scatters the values into zeros."""

    def decode(self, payload, ctx, numel, dtype):
        values, idx = payload[0], payload[1]
        out = torch.zeros(numel, dtype=dtype, device=values.device)
        if idx.numel():
            out[idx.long()] = values.to(dtype)
        return out


@register("topk")
class TopK(SparseCodec):
    """Exact Top-k by magnitude (``density`` or ``k``; see the module docstring)."""

    name = "topk"

    def __init__(self, density: float = 0.01, k: int | None = None, seed: int = 0):
        check_density(density, k)
        self.density, self.k = density, k
        super().__init__(seed=seed)

    def encode(self, flat, key):
        k = resolve_k(flat.numel(), self.density, self.k)
        idx = topk_indices(flat.abs(), k)
        return sparse_payload(flat, idx), None

    def __repr__(self):
        arg = f"k={self.k}" if self.k is not None else f"density={self.density}"
        return f"TopK({arg})"
