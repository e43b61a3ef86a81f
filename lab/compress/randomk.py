"""Random-k sparsification: keep k coordinates drawn uniformly without replacement.

Stich, Cordonnier, Jaggi, "Sparsified SGD with Memory", NeurIPS 2018 (Definition 2.1, rand_k).
Unscaled (the default, as in that paper) it is a contraction meant for error feedback; with
``scale=True`` the kept values are multiplied by n/k, which makes it unbiased:
E[C(x)] = x, with variance (n/k - 1) ||x||^2.

Two variants:

- ``"randomk"`` (the default; also registered as ``"randomk_shared"``): every rank draws from
  the same seed, so the indices coincide; the payload is the values only (k floats), the
  indices stay in the rank-local ctx, and an allreduce sums the payloads
  (``allreduce_compatible``): half the bytes of the private variant and no growth with the
  number of ranks. This is what GRACE's ``RandomKCompressor`` does (Xu et al., "GRACE: A
  Compressed Communication Framework for Distributed Machine Learning", ICDCS 2021;
  ``grace_dl/torch/compressor/randomk.py``: a seed from the tensor's name and the step). All
  ranks must call ``compress`` the same number of times with the same sizes, or their
  generators drift apart.
- ``"randomk_private"``: a private seed per rank; the payload carries (values, int32
  indices) and travels by allgather. Independent draws on p ranks average to a lower
  variance than one shared draw, at twice the bytes per rank and an allgather.

Trap avoided: indices drawn *with* replacement give fewer than k distinct coordinates.
"""
from __future__ import annotations

import torch

from ..argspec import Arg, takes
from . import native_small
from .base import Part, WireFormat, register
from .topk import DENSITY, EXACT_K, KEPT, RAGGED, SparseCodec, resolve_k, sparse_payload
from .wire import range_error


def distinct_indices(n: int, k: int, generator: torch.Generator, device="cpu") -> torch.Tensor:
    """k distinct indices uniform in [0, n), as a uniformly random k-subset.

    ``randperm`` costs O(n); for k much smaller than n, draw ~k with replacement, deduplicate
    and top up (rejection), then shuffle the survivors so the k kept are a uniform subset.
    """
    if k * 8 >= n:
        return torch.randperm(n, generator=generator, device=device)[:k]
    got = torch.empty(0, dtype=torch.int64, device=device)
    while got.numel() < k:
        draw = torch.randint(n, (k - got.numel() + k // 16 + 8,), generator=generator,
                             device=device)
        got = torch.unique(torch.cat([got, draw]))
    # unique() sorts: a random permutation picks a uniform subset of the (exchangeable) pool
    return got[torch.randperm(got.numel(), generator=generator, device=device)[:k]]


@register("randomk_private")
@takes(density=DENSITY, k=KEPT, scale=Arg(bool, help="multiply kept values by n/k (unbiased)"))
class RandomK(SparseCodec):
    """Random-k with a private per-rank seed; ``scale=True`` multiplies kept values by n/k."""
    fixed_size = True

    name = "randomk_private"
    wire = EXACT_K

    def __init__(self, density: float = 0.01, k: int | None = None, scale: bool = False,
                 seed: int = 0):
        self.density, self.k, self.scale = density, k, scale
        super().__init__(seed=seed)

    def _select_small(self, flat, with_int32: bool):
        """``(idx, values, int32 idx)`` as :meth:`_select` and :func:`sparse_payload` give them
        for a plain 1-D float32 ``flat``, the indices drawn in C from the generator's state
        exactly as :func:`distinct_indices` draws them with torch (the generator left in the
        same state) and the values gathered in the same call; None where that does not apply
        (scaling, k = 0, a torch whose draws the kernel does not reproduce)."""
        n = flat.numel()
        try:
            k = resolve_k(n, self.density, self.k)
        except ValueError:  # k > n: the general route raises it, after its finiteness check
            return None
        if self.scale or not 0 < k <= n < 2 ** 31 or not native_small.rng_exact(distinct_indices):
            return None
        return native_small.random_indices(self.generator, n, k, flat, with_int32)

    def _select(self, flat):
        n = flat.numel()
        k = resolve_k(n, self.density, self.k)
        idx = distinct_indices(n, k, self.generator_for(flat.device), flat.device) if k else \
            torch.empty(0, dtype=torch.int64, device=flat.device)
        vals = flat[idx]
        if self.scale and k:
            vals = vals * (n / k)
        return idx, vals

    def encode_plain(self, x, key):
        # checked, drawn from and gathered in one C call; NaN/Inf take the general route,
        # which raises before drawing
        picked = self._select_small(x, True) if x.dim() == 1 else None
        return None if picked is None else ((picked[1], picked[2]), None)

    def encode(self, flat, key):
        idx, vals = self._select(flat)
        return sparse_payload(flat, idx, vals), None

    def __repr__(self):
        arg = f"k={self.k}" if self.k is not None else f"density={self.density}"
        return f"{type(self).__name__}({arg}, scale={self.scale})"


@register("randomk")
class SharedRandomK(RandomK):
    """Random-k with one seed for all ranks: payload = values only, summed by allreduce."""

    name = "randomk"
    shared_randomness = True
    allreduce_compatible = True
    wire = WireFormat(Part("values", "input", "k"), where=EXACT_K.where)

    def encode_plain(self, x, key):
        # as RandomK's, the payload the values only; ctx: the indices
        picked = self._select_small(x, False) if x.dim() == 1 else None
        return None if picked is None else ((picked[1],), picked[0])

    def encode(self, flat, key):
        idx, vals = self._select(flat)
        return (vals,), idx  # ctx: the indices, identical on every rank, never sent

    def decode(self, payload, ctx, numel, dtype):
        values = payload[0]
        if dtype is torch.float32 and values.dtype is torch.float32 \
                and ctx.__class__ is torch.Tensor and ctx.dtype is torch.int64 \
                and ctx.numel() == values.numel() and native_small.enabled(values) \
                and values.is_contiguous() and ctx.is_contiguous() and ctx.is_cpu:
            out = native_small.scatter(values, ctx, numel)  # zeroes and scatters: one C call
            if out is None:
                raise range_error(self.name, RAGGED.parts[1], numel, ctx)
            return out
        return super().decode((payload[0], ctx), None, numel, dtype)


@register("randomk_shared")
class SharedRandomKAlias(SharedRandomK):
    """``"randomk_shared"``: the name the shared-seed Random-k had before it became the
    default ``"randomk"``; the same codec."""

    name = "randomk_shared"
