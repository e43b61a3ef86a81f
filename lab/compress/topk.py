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

Speed, still exact: on large tensors (n >= 2**17) the selection first estimates a threshold
from a 1% sample aimed at about 2k candidates (DGC's hierarchical selection, Lin et al.,
ICLR 2018, Sec. 5), keeps ``|x| >= thr`` in one pass and runs ``torch.topk`` on the candidates
only. If at least k entries pass, every one of the true top k is among them (the k-th largest
is >= thr), so the answer is exact; if fewer pass (an unlucky sample) it falls back to a full
``torch.topk``. The sample uses the codec's generator; the kept set does not depend on it.
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


SAMPLED_MIN_N = 2 ** 17  # below this a plain torch.topk is as fast as the sampled route


def sampled_threshold(mag: torch.Tensor, frac: float, sample: float, generator: torch.Generator,
                      min_sample: int = 1000) -> torch.Tensor:
    """Estimate the magnitude above which a fraction ``frac`` of ``mag`` lies, from a sample
    of ``max(min_sample, sample * n)`` positions drawn with replacement (exact if that is n)."""
    n = mag.numel()
    s = min(n, max(min_sample, math.ceil(sample * n)))
    if s == n:
        picked = mag
    else:
        picked = mag[torch.randint(n, (s,), generator=generator).to(mag.device)]
    ks = min(s, max(1, round(frac * s)))  # round, not ceil: 1 - 0.99 is 0.01000...0009
    return torch.topk(picked, ks, sorted=False).values.min()


def candidates_topk(mag: torch.Tensor, k: int, thr: torch.Tensor) -> torch.Tensor:
    """Entries with ``mag >= thr``, cut to the k largest among them when more pass."""
    cand = torch.where(mag >= thr)[0]
    if cand.numel() > k:
        cand = cand[torch.topk(mag[cand], k, sorted=False).indices]
    return cand


def topk_indices(mag: torch.Tensor, k: int, generator: torch.Generator | None = None,
                 overshoot: float = 2.0, sample: float = 0.01) -> torch.Tensor:
    """Indices of the k largest entries of ``mag`` (non-negative, 1-D), unsorted; exact.

    With a ``generator`` and a large tensor, the sampled-threshold route of the module
    docstring (exact whenever at least k candidates pass, else a full ``torch.topk``)."""
    n = mag.numel()
    if k >= n:
        return torch.arange(n, device=mag.device)
    if generator is not None and n >= SAMPLED_MIN_N:
        cand = candidates_topk(mag, k, sampled_threshold(mag, overshoot * k / n, sample, generator))
        if cand.numel() == k:
            return cand
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
        idx = topk_indices(flat.abs(), k, self.generator)
        return sparse_payload(flat, idx), None

    def __repr__(self):
        arg = f"k={self.k}" if self.k is not None else f"density={self.density}"
        return f"TopK({arg})"
