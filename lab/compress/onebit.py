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

import ctypes
import math
from dataclasses import dataclass

import numpy as np
import torch

from ..argspec import SEED, Arg, takes
from . import native, native_small
from .base import Compressor, Part, WireFormat, all_finite, check_finite, float32s, register
from .error_feedback import ErrorFeedback
from .packing import expand_bits, pack_bits, unpack_bits
from .qsgd import as_buckets

ONEBIT = dict(bucket_size=Arg(int, ge=1, le=2 ** 24, none=True,
                              help="values per bucket (None: one bucket, or per_column)"),
              per_column=Arg(bool, help="one bucket per column of a matrix (Seide et al.)"))
from .sign import nonnegative, sign_bits


def count_true(rows: torch.Tensor) -> torch.Tensor:
    """The number of True entries in each row of a 2-D bool tensor, as int32. On the CPU by
    numpy (``count_nonzero`` for one row, a byte sum otherwise: 3-10x torch's, which widens
    every entry first); elsewhere a byte sum into int32."""
    if rows.is_cpu:
        a = rows.contiguous().numpy()
        counts = (np.array([np.count_nonzero(a)]) if rows.shape[0] == 1
                  else np.add.reduce(a.view(np.uint8), axis=1, dtype=np.int32))
        return torch.from_numpy(counts.astype(np.int32, copy=False))
    return rows.view(torch.uint8).sum(dim=1, dtype=torch.int32)


def side_sums(x: torch.Tensor, bucket: int):
    """The packed flags ``x >= 0``, the (buckets, 2) sums of the values >= 0 and of the others,
    and the counts of values >= 0 per bucket: float64 sums on the CPU (as the kernel there),
    float32 elsewhere."""
    n = x.numel()
    v = as_buckets(x, bucket)  # (buckets, bucket), zero padded
    pos = nonnegative(v)  # sign(0) = +1, as in lab.compress.sign
    wide = v.double() if v.is_cpu else v
    side = wide.clamp(min=0)  # one scratch for both sides: a fresh big tensor faults its pages in
    s_pos = side.sum(dim=1)
    s_neg = torch.clamp(wide, max=0, out=side).sum(dim=1)
    n_pos = count_true(pos).to(dtype=torch.int64)
    if v.numel() > n:  # the last bucket's padding zeros were counted as >= 0: they are not data
        n_pos[-1] -= v.numel() - n
    return pack_bits(pos.reshape(-1)[:n]), torch.stack([s_pos, s_neg], dim=1), n_pos


@dataclass(frozen=True)
class _Columns:
    """Marks a per-column encoding (passed as the key to encode, kept as the ctx)."""
    rows: int


def _one_bucket_means(sums: list, n_pos: int, n: int, x: torch.Tensor) -> torch.Tensor:
    """float32 (mean of the values >= 0, mean of the others) of one bucket from its float64
    sums and count, as the tensor path computes them (float64 division, then rounded to
    float32 to nearest), each count at least 1; raises on NaN/Inf as it does."""
    if not (math.isfinite(sums[0]) and math.isfinite(sums[1])):
        check_finite(x, "onebit")
        raise OverflowError("onebit: a bucket's sum exceeds the float32 range; scale the "
                            "tensor first")
    pos, neg = sums[0] / max(n_pos, 1), sums[1] / max(n - n_pos, 1)
    return float32s(ctypes.c_float(pos).value, ctypes.c_float(neg).value)


@register("onebit")
@takes(**ONEBIT)
class OneBit(Compressor):
    """1-bit quantiser with mean-of-positives / mean-of-negatives reconstruction."""
    fixed_size = True
    checks_finite = True  # through its two side sums

    name = "onebit"
    wire = WireFormat(Part("signs", torch.uint8, "ceil(n / 8)"),
                      Part("means", torch.float32, "2 * buckets", "finite"),
                      where={"buckets": "ceil(n / bucket_size) (1 if bucket_size is None; "
                                        "per_column: the columns)"})

    def __init__(self, bucket_size: int | None = None, per_column: bool = False, seed: int = 0):
        self.bucket_size, self.per_column = bucket_size, per_column
        super().__init__(seed=seed)

    # -- per column: quantise the transpose, so that each column is one contiguous bucket ----
    def compress(self, tensor, key=None):
        if self.per_column and isinstance(tensor, torch.Tensor) and tensor.dim() == 2 \
                and tensor.numel():
            cols = _Columns(tensor.shape[0])
            payload, (_, dtype, _) = super().compress(tensor.t(), cols)
            return payload, (tensor.shape, dtype, cols)
        return super().compress(tensor, key)

    def encode_plain(self, x, key):
        # a tensor in one bucket (not a column of per_column): one C call
        n = x.numel()
        if isinstance(key, _Columns) or not n or n > (self.bucket_size or n):
            return None
        payload = self._encode_small(x, n)
        return None if payload is None else (payload, None)

    @staticmethod
    def _encode_small(x, n: int):
        """One bucket's payload in one C call (the sign bits, both side sums, the two means;
        the values of :meth:`encode`'s route) for ``x`` of ``n`` > 0 values that
        :func:`~lab.compress.native_small.plain` takes; None for NaN/Inf (that route raises)."""
        bits = native_small.BYTES.new_empty((n + 7) // 8)
        means = native_small.FLOATS.new_empty(2)
        if native_small.K.lab_onebit_encode(x.data_ptr(), n, bits.data_ptr(),
                                            means.data_ptr()):
            return None
        return bits, means

    def decompress(self, payload, ctx):
        shape, dtype, inner = ctx
        if isinstance(inner, _Columns):
            out = self.decode(self.check_payload(payload, ctx), inner, shape.numel(), dtype)
            return out.view(shape[1], shape[0]).t().contiguous()
        return super().decompress(payload, ctx)

    def decode_plain(self, payload, n):
        # one bucket: ceil(n / 8) sign bytes and two finite means
        if not n or n > (self.bucket_size or n):
            return None
        got = native_small.parts(payload, (torch.uint8, (n + 7) // 8), (torch.float32, 2))
        if got is not None:
            pos, neg = got[1].tolist()
            if math.isfinite(pos) and math.isfinite(neg):
                return native_small.expand_pair(got[0], n, neg, pos)
        return None

    def wire_vars(self, numel, ctx, payload):
        return {"buckets": -(-numel // self._bucket(numel, ctx))}

    def _bucket(self, numel: int, cols) -> int:
        if isinstance(cols, _Columns):
            return cols.rows
        return self.bucket_size or max(numel, 1)

    def encode(self, flat, key):
        n = flat.numel()
        bucket = self._bucket(n, key)
        payload = self._encode_small(flat, n) if n and bucket >= n \
            and native_small.plain(flat) else None
        if payload is not None:
            return payload, None
        x = flat.float()
        if native.enabled(x):  # sign bits, both sums and the counts in two passes (kernels.c)
            bits, sums, n_pos = sign_bits(x), *native.side_sums(x, bucket)
            if n and bucket >= n:  # one bucket: its two means in Python floats, no tensor ops
                return (bits, _one_bucket_means(sums.tolist()[0], n_pos.item(), n, x)), None
        else:
            bits, sums, n_pos = side_sums(x, bucket)
        sizes = torch.full_like(n_pos, bucket)
        if sizes.numel():
            sizes[-1] = n - bucket * (sizes.numel() - 1)  # the last bucket may be short
        if sums.numel() and not all_finite(sums.amax(), sums.amin()):  # NaN/Inf reach a sum
            check_finite(x, self.name)
            raise OverflowError(f"{self.name}: a bucket's sum exceeds the float32 range; "
                                "scale the tensor first")
        counts = torch.stack([n_pos, sizes - n_pos], dim=1).clamp(min=1)
        means = (sums / counts.to(sums.device, sums.dtype)).float()  # (mean >= 0, mean < 0)
        return (bits, means.reshape(-1)), None

    def decode(self, payload, ctx, numel, dtype):
        bits, means = payload
        if means.numel() == 2 and native.enabled(bits) and bits.is_contiguous():
            pos, neg = means.tolist()  # one bucket: no tensors built for its two means
            out = native.expand_pair(bits, numel, neg, pos)
            return out if dtype is torch.float32 else out.to(dtype=dtype)
        means = means.float().view(-1, 2)
        if means.shape[0] == 1:  # one bucket: read the two means from a byte table
            return expand_bits(bits, numel, means[0, 0], means[0, 1]).to(dtype=dtype)
        bucket = self._bucket(numel, ctx)
        if (bucket % 8 == 0 or numel <= bucket) and native.enabled(bits):  # one pass (kernels.c)
            return native.expand_bits(bits, numel, bucket, means.flip(1)).to(dtype=dtype)  # (neg, pos)
        pos = as_buckets(unpack_bits(bits, numel), bucket)
        out = torch.where(pos, means[:, :1], means[:, 1:])  # the mean of its side, per bucket
        return out.reshape(-1)[:numel].to(dtype=dtype)

    def __repr__(self):
        return f"OneBit(bucket_size={self.bucket_size}, per_column={self.per_column})"


@register("onebit_sgd")
@takes(**ONEBIT, seed=SEED)
class OneBitSGD(ErrorFeedback):
    """1-bit SGD as in the paper: the 1-bit quantiser with error feedback."""

    name = "onebit_sgd"

    def __init__(self, bucket_size: int | None = None, per_column: bool = False, seed: int = 0):
        super().__init__(OneBit(bucket_size=bucket_size, per_column=per_column, seed=seed))
        self.name = "onebit_sgd"
