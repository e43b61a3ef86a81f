"""1-bit SGD: one bit per value, reconstructed with two means, plus error feedback.

Seide, Fu, Droppo, Li, Yu, "1-Bit Stochastic Gradient Descent and its Application to
Data-Parallel Distributed Training of Speech DNNs", Interspeech 2014. Each value is
quantised to one bit (its sign); the receiver reconstructs a 1 with the mean of the entries
that were >= 0 and a 0 with the mean of the entries that were < 0 (the two values that minimise
the squared reconstruction error for that split), and the quantisation error is added to the
next minibatch's gradient (error feedback, the paper's key ingredient: ``onebit_sgd``).

The paper computes the two means per column of each weight matrix. Here they are per tensor by
default (one bucket: two float32 scalars), per ``bucket_size`` consecutive values, or, with
``per_column=True``, per column of a 2-D tensor as in the paper (2 floats per column).
Wire: ceil(n/8) bytes of bits + 8 bytes per bucket.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .base import Compressor, check_int, register
from .error_feedback import ErrorFeedback
from .packing import pack_bits, unpack_bits


@dataclass(frozen=True)
class _Columns:
    """Marks a per-column encoding (passed as the key to encode, kept as the ctx)."""
    rows: int


def _bucket_ids(numel: int, bucket: int, device) -> torch.Tensor:
    return torch.arange(numel, device=device) // bucket


@register("onebit")
class OneBit(Compressor):
    """1-bit quantiser with mean-of-positives / mean-of-negatives reconstruction."""
    fixed_size = True

    name = "onebit"

    def __init__(self, bucket_size: int | None = None, per_column: bool = False, seed: int = 0):
        self.bucket_size = check_int("bucket_size", bucket_size, 1, allow_none=True)
        if not isinstance(per_column, bool):
            raise TypeError(f"per_column must be a bool, got {type(per_column).__name__}")
        self.per_column = per_column
        super().__init__(seed=seed)

    # -- per column: quantise the transpose, so that each column is one contiguous bucket ----
    def compress(self, tensor, key=None):
        if self.per_column and isinstance(tensor, torch.Tensor) and tensor.dim() == 2 \
                and tensor.numel():
            cols = _Columns(tensor.shape[0])
            payload, (_, dtype, _) = super().compress(tensor.t(), cols)
            return payload, (tensor.shape, dtype, cols)
        return super().compress(tensor, key)

    def decompress(self, payload, ctx):
        shape, dtype, inner = ctx
        if isinstance(inner, _Columns):
            out = self.decode(tuple(payload), inner, shape.numel(), dtype)
            return out.view(shape[1], shape[0]).t().contiguous()
        return super().decompress(payload, ctx)

    def _bucket(self, numel: int, cols) -> int:
        if isinstance(cols, _Columns):
            return cols.rows
        return self.bucket_size or max(numel, 1)

    def encode(self, flat, key):
        n = flat.numel()
        bucket = self._bucket(n, key)
        x = flat.float()
        pos = x >= 0  # sign(0) = +1, as in lab.compress.sign
        ids = _bucket_ids(n, bucket, x.device)
        nb = -(-n // bucket)
        zero = torch.zeros(nb, device=x.device)
        s_pos = zero.index_add(0, ids, torch.where(pos, x, 0.0))
        n_pos = zero.index_add(0, ids, pos.float())
        s_neg = zero.index_add(0, ids, torch.where(pos, 0.0, x))
        n_neg = zero.index_add(0, ids, (~pos).float())
        means = torch.stack([s_pos / n_pos.clamp(min=1), s_neg / n_neg.clamp(min=1)], dim=1)
        return (pack_bits(pos), means.reshape(-1)), None

    def decode(self, payload, ctx, numel, dtype):
        bits, means = payload
        pos = unpack_bits(bits, numel)
        ids = _bucket_ids(numel, self._bucket(numel, ctx), bits.device)
        means = means.float().view(-1, 2)
        return torch.where(pos, means[ids, 0], means[ids, 1]).to(dtype)

    def __repr__(self):
        return f"OneBit(bucket_size={self.bucket_size}, per_column={self.per_column})"


@register("onebit_sgd")
class OneBitSGD(ErrorFeedback):
    """1-bit SGD as in the paper: the 1-bit quantiser with error feedback."""

    def __init__(self, bucket_size: int | None = None, per_column: bool = False, seed: int = 0):
        super().__init__(OneBit(bucket_size=bucket_size, per_column=per_column, seed=seed))
        self.name = "onebit_sgd"
