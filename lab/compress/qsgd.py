"""QSGD: unbiased stochastic quantisation onto s levels per bucket.

Alistarh, Grubic, Li, Tomioka, Vojnovic, "QSGD: Communication-Efficient SGD via Gradient
Quantization and Encoding", NeurIPS 2017 (Sec. 3.1). For a bucket v of n values:

    Q_s(v_i) = ||v||_2 * sign(v_i) * xi_i(v, s),   xi_i = l/s  or  (l+1)/s,

where l/s <= |v_i|/||v|| < (l+1)/s and the upper level is taken with probability
s|v_i|/||v|| - l, so E[Q_s(v)] = v (Lemma 3.1) and
E||Q_s(v) - v||^2 <= min(n/s^2, sqrt(n)/s) ||v||^2.

Wire (this fixed-length variant): one float32 norm per bucket, ceil(n/8) bytes of sign bits and
ceil(n * b / 8) bytes of levels with b = ceil(log2(s + 1)) bits. The paper's Elias-coded
variant for small s is :mod:`lab.compress.qsgd_elias`.
"""
from __future__ import annotations

import math
import struct

import numpy as np
import torch

from ..argspec import Arg, takes
from . import device, native, native_small
from .base import (Compressor, Part, WireFormat, bernoulli, check_finite, register,
                   round_stochastic, truncate)
from .fused import fused, on_device_path
from .packing import expand_codes, pack_bits, pack_uint, unpack_uint
from .sign import negative, set_sign, set_sign_bits


#: values per bucket (a short last bucket is padded to it), or None: the tensor is one bucket
BUCKET = Arg(int, ge=1, le=2 ** 24, none=True, help="values per bucket (None: one bucket)")

_BLOCK = 2 ** 16  # rows up to this long get torch's one-pass norm: ~1e-6 relative error there

#: A float32 norm below this may have lost squares to underflow (a value under 1.1e-19 squares
#: to a subnormal or to 0: a bucket whose largest entry is 3.75e-30 has norm 0): such buckets
#: are measured again, scaled. Above it, what underflow can lose (under 1.2e-38 a value) is
#: below float32's rounding even for 2^16-value buckets, so the plain norm stands, bit for bit.
SMALL_NORM = 2.0 ** -40
_SMALL_BITS = struct.unpack("<I", struct.pack("<f", SMALL_NORM))[0]


def bucket_norms(buckets: torch.Tensor) -> torch.Tensor:
    """l2 norm of each row, float32, without overflow or underflow: ||v|| = m ||v / m||,
    m = max|v|, in float64.

    Squaring 1e30 overflows float32 (the naive norm returns Inf and the codec NaN), squaring
    1e-30 underflows to 0 (the codec would send zeros); scaling is only needed then, so it runs
    only for the rows whose plain norm came out infinite or below :data:`SMALL_NORM`."""
    if buckets.shape[1] <= _BLOCK:
        norms = torch.linalg.vector_norm(buckets, dim=1)
    else:  # a long vector_norm sums sequentially (~1e-4 off at 4M values)
        norms = sums_of_squares(buckets).sqrt()
    if not norms.numel():
        return norms
    lo, hi = torch.aminmax(norms)
    if not math.isfinite(hi.item()):
        check_finite(buckets, "qsgd")  # NaN or Inf in the input; else the squares overflowed
        m = buckets.abs().amax(dim=1, keepdim=True).clamp(min=torch.finfo(torch.float32).tiny)
        norms = (torch.linalg.vector_norm(buckets / m, dim=1, dtype=torch.float64)
                 * m.reshape(-1).double())
        if not torch.isfinite(norms.float()).all():
            raise OverflowError("qsgd: a bucket's l2 norm exceeds the float32 range "
                                f"({norms.max().item():.3g}); scale the tensor first")
        norms = norms.float()
    elif lo.item() < SMALL_NORM:
        small = norms < SMALL_NORM
        norms = norms.clone()
        norms[small] = _scaled_norms(buckets[small]).float()
    return norms


def _scaled_norms(rows: torch.Tensor) -> torch.Tensor:
    """float64 l2 norms of ``rows``, each row scaled by its largest |entry| before squaring."""
    m = rows.abs().amax(dim=1, keepdim=True).double().clamp(min=torch.finfo(torch.float64).tiny)
    return torch.linalg.vector_norm(rows.double() / m, dim=1) * m.reshape(-1)


def sums_of_squares(rows: torch.Tensor) -> torch.Tensor:
    """sum_j x_ij^2 of each row of 2-D float32 ``rows``, accurately and in one pass: the l2
    norms of 65536-value blocks (one long vector_norm sums sequentially, ~1e-4 off at 4M
    values), then squared and summed pairwise."""
    full = rows.shape[1] // _BLOCK * _BLOCK
    blocks = torch.linalg.vector_norm(rows[:, :full].reshape(rows.shape[0], -1, _BLOCK), dim=2)
    return blocks.square().sum(dim=1) + rows[:, full:].square().sum(dim=1)


def as_buckets(x: torch.Tensor, bucket: int) -> torch.Tensor:
    """``x`` zero-padded to whole buckets, viewed as (buckets, bucket) (no copy if it fits)."""
    pad = (-x.numel()) % bucket
    return (torch.cat([x, x.new_zeros(pad)]) if pad else x).view(-1, bucket)


def ratios(v: torch.Tensor, norms: torch.Tensor, scale: float) -> torch.Tensor:
    """``scale * |v_i| / ||v||`` for each row of buckets ``v`` (float32; a new tensor)."""
    if v.is_cpu:  # numpy's in-place passes: ~2x torch's on one thread
        out = np.abs(v.detach().numpy())
        np.divide(out, norms.numpy()[:, None], out=out)
        np.multiply(out, np.float32(scale), out=out)
        return torch.from_numpy(out)
    return v.abs().div_(norms[:, None]).mul_(scale)


def scale_buckets_(x: torch.Tensor, scale: torch.Tensor, bucket: int) -> torch.Tensor:
    """``x[i] *= scale[i // bucket]`` in place, for 1-D contiguous float32 ``x`` (the last bucket
    may be short)."""
    full = x.numel() // bucket * bucket
    head, tail = x[:full].view(-1, bucket), x[full:]
    if x.is_cpu:
        h, sc = head.numpy(), scale.numpy()
        np.multiply(h, sc[:h.shape[0], None], out=h)
    else:
        head.mul_(scale[:head.shape[0], None])
    if tail.numel():
        tail.mul_(scale[-1])
    return x


def quantize(flat: torch.Tensor, s: int, bucket: int, generator: torch.Generator):
    """Return (norms float32 per bucket, levels in [0, s], negative bool) for ``flat``.

    Levels are uint8 when s < 256 (int32 beyond). ``generator`` must live on ``flat``'s
    device (:meth:`Compressor.generator_for`)."""
    x = flat.float()
    n = x.numel()
    v = as_buckets(x, bucket)
    norms = bucket_norms(v)
    safe = torch.where(norms > 0, norms, torch.ones_like(norms))  # an all-zero bucket stays 0
    if on_device_path(x):  # one uniform per value is cheap on a GPU; fuse the whole chain
        u = torch.rand(v.shape, generator=generator, device=v.device)
        levels = stochastic_levels(v, safe[:, None], u, s, torch.uint8 if s < 256 else torch.int32)
    elif s < 256 and native.enabled(x):  # the same rounding in one pass (kernels.c)
        levels, neg = native.stochastic_levels(x, bucket, safe, s, generator)
        return norms, levels, neg
    elif s < 256:  # r = s |v_i| / ||v||, rounded up with probability r - floor(r) (Lemma 3.1)
        r256 = ratios(v, safe, 256 * s).reshape(-1)[:n]  # random bits for the n values only
        levels = round_stochastic(r256, s, generator)
    else:  # levels beyond a byte: floor, then a Bernoulli draw for the fraction
        r = ratios(v, safe, s).clamp_(max=s).reshape(-1)[:n]  # rounding may give |v_i| > ||v||
        low = truncate(r, torch.int32)
        levels = low.add_(bernoulli(r.sub_(low), generator))
    return norms, levels.reshape(-1)[:n], negative(x)


@fused
def stochastic_levels(v, norm, u, s: int, dtype):
    """Level l + 1 with probability r - l, else l, for r = s |v| / norm (u uniform in [0, 1))."""
    r = (v.abs() / norm * s).clamp(max=s)
    low = r.floor()
    return (low + (u < r - low).float()).to(dtype=dtype)


def dequantize(norms, levels, negative, s: int, bucket: int, numel: int) -> torch.Tensor:
    """float32 values ``norm * sign * level / s`` (``negative``: bool, or packed sign bits).

    ``levels`` may be float32 already (then it is scaled in place)."""
    mag = scale_buckets_(levels.reshape(-1)[:numel].float().contiguous(), norms.float(), bucket)
    mag.div_(s)
    if negative.dtype == torch.uint8:  # packed bits: or each sign bit in from a byte table
        return set_sign_bits(mag, negative)
    return set_sign(mag, negative)


def levels_arg(default: int) -> Arg:
    """The declaration of ``s``, the levels per sign (a level 0..s is sent in
    ceil(log2(s + 1)) bits, at most 32), for a codec whose default is ``default``."""
    return Arg(int, ge=1, lt=2 ** 32, none=True,
               help=f"levels per sign (None: {default}, or 2**bits - 1 where bits is given)")


#: the same choice in bits: s = 2**bits - 1, the most levels ``bits`` bits hold
BITS = Arg(int, ge=1, le=32, none=True,
           help="bits per level instead of s: s = 2**bits - 1 (bits=4 is s=15); the sign "
                "bit and the norms are sent besides")


def resolve_levels(s: int | None, bits: int | None, default: int) -> int:
    """The levels ``s`` that ``s=`` or ``bits=`` asks for (``bits``: ``2**bits - 1``, the most
    levels that fit), ``default`` where neither is given; the two together are refused by the
    declaration's rule (:func:`one_of_s_and_bits`)."""
    if bits is not None:
        return 2 ** bits - 1
    return default if s is None else s


def one_of_s_and_bits(values: dict) -> str | None:
    """The rule of QSGD's declaration: ``s`` and ``bits`` name one choice, so not both."""
    if values.get("s") is not None and values.get("bits") is not None:
        return (f"give s or bits, not both (bits={values['bits']} means "
                f"s={2 ** values['bits'] - 1}), got s={values['s']}, bits={values['bits']}")
    return None


@register("qsgd")
@takes(s=levels_arg(15), bucket_size=BUCKET, bits=BITS, rule=one_of_s_and_bits)
class QSGD(Compressor):
    """QSGD with ``s`` levels and buckets of ``bucket_size`` values (None: one bucket).

    ``bits`` instead of ``s`` asks for the most levels that ``bits`` bits hold,
    ``s = 2**bits - 1``; either way ``self.bits`` is ``ceil(log2(s + 1))``, the bits each
    level takes on the wire (``make("qsgd", bits=4).s == 15``)."""
    fixed_size = True
    checks_finite = True  # through its bucket norms

    name = "qsgd"
    wire = WireFormat(Part("norms", torch.float32, "buckets", "finite >= 0"),
                      Part("signs", torch.uint8, "ceil(n / 8)"),
                      Part("levels", torch.uint8, "ceil(n * bits / 8)"),
                      where={"buckets": "ceil(n / bucket_size) (1 if bucket_size is None)",
                             "bits": "ceil(log2(s + 1))"})

    def __init__(self, s: int | None = None, bucket_size: int | None = 512, seed: int = 0,
                 bits: int | None = None):
        self.s, self.bucket_size = resolve_levels(s, bits, 15), bucket_size
        self.bits = self.s.bit_length()  # ceil(log2(s + 1)): levels 0..s
        super().__init__(seed=seed)

    def _bucket(self, numel: int) -> int:
        return self.bucket_size or max(numel, 1)

    def wire_vars(self, numel, ctx, payload):
        return {"buckets": -(-numel // self._bucket(numel))}

    def encode_plain(self, x, key):
        # the fused kernel (:meth:`_encode_small`); a subclass with a payload of its own
        # (QSGD-Elias) keeps the general route
        if type(self).encode is not QSGD.encode or not x.numel():
            return None
        payload = self._encode_small(x)
        return None if payload is None else (payload, None)

    def _encode_small(self, x):
        """:meth:`encode`'s payload for a plain float32 ``x``: one C pass checks that every
        norm will be finite (finite values below 2^50) and copies x to a buffer of whole
        buckets, the last padded with zeros (as ``as_buckets`` pads it); torch's own
        ``vector_norm`` of them (its bits are the payload's); then the levels, sign bits and
        packing in one C pass, drawn with the generator as ``quantize`` draws. None (nothing
        drawn) where the general route is needed: s >= 256, long buckets, NaN/Inf, huge
        values, or a norm below :data:`SMALL_NORM` (that route raises, or measures again a
        bucket whose squares overflow or underflow)."""
        n, bucket = x.numel(), self._bucket(x.numel())
        if self.s >= 256 or bucket > _BLOCK:
            return None
        rows = -(-n // bucket)
        # x's buckets: copied where small (a buffer of this thread: no view, no allocation) or
        # where the last is short (padded), else viewed
        v = None if rows * bucket == n and n > 16384 else native_small.scratch(rows, bucket)
        if not native_small.K.lab_qsgd_prepare(x.data_ptr(), n,
                                               None if v is None else v.data_ptr(),
                                               rows * bucket):
            return None
        norms = torch.linalg.vector_norm(x.view(rows, bucket) if v is None else v, dim=1)
        # the smallest norm's float32 bits (norms are >= 0 and finite here, so their bits are
        # in the order of their values): one C pass over the norms, no unpacking
        if native_small.K.lab_float32_range(norms.data_ptr(), rows) & 0xFFFFFFFF < _SMALL_BITS:
            return None  # squares may have underflowed: bucket_norms measures again, scaled
        signs = native_small.BYTES.new_empty((n + 7) // 8)
        levels = native_small.BYTES.new_empty((n * self.bits + 7) // 8)
        native_small.K.lab_qsgd_encode(
            x.data_ptr(), n, bucket, norms.data_ptr(), self.s, self.bits,
            native_small.key(self.generator), signs.data_ptr(), levels.data_ptr())
        return norms, signs, levels

    def decode_plain(self, payload, n):
        # finite norms >= 0, one per bucket, ceil(n / 8) sign bytes, ceil(n bits / 8) level
        # bytes: one C call
        bucket = self._bucket(n)
        if self.bits in (1, 2, 4, 8) and (bucket % 8 == 0 or n <= bucket) and n \
                and type(self).decode is QSGD.decode:
            got = native_small.parts(payload, (torch.float32, -(-n // bucket)),
                                     (torch.uint8, (n + 7) // 8),
                                     (torch.uint8, (n * self.bits + 7) // 8))
            if got is not None:
                norms, signs, levels = got
                out = native_small.FLOATS.new_empty(n)
                if not native_small.K.lab_dequantize_checked(  # norms finite, >= 0
                        levels.data_ptr(), self.bits, signs.data_ptr(), n, bucket,
                        norms.data_ptr(), self.s, out.data_ptr()):
                    return out
        return None

    def encode(self, flat, key):
        bucket = self._bucket(flat.numel())
        if self.bits in (1, 2, 4, 8) and device.usable(flat) and flat.numel() % bucket == 0:
            # the device path: the draws as :func:`quantize` draws them, levels and signs
            # rounded and packed in one fused kernel
            v = flat.float().view(-1, bucket)
            norms = bucket_norms(v)
            safe = torch.where(norms > 0, norms, torch.ones_like(norms))
            u = torch.rand(v.shape, generator=self.generator_for(v.device), device=v.device)
            return (norms, *device.qsgd_encode(v, safe[:, None], u, self.s, self.bits)), None
        norms, levels, neg = quantize(flat, self.s, self._bucket(flat.numel()),
                                      self.generator_for(flat.device))
        return (norms, pack_bits(neg), pack_uint(levels, self.bits, check=False)), None

    def decode(self, payload, ctx, numel, dtype):
        norms, signs, levels = payload
        bucket = self._bucket(numel)
        if self.bits in (1, 2, 4, 8) and device.usable(levels, numel) and numel % bucket == 0:
            return device.qsgd_decode(norms, signs, levels, self.s, bucket,
                                      self.bits).to(dtype=dtype)  # one fused kernel
        if self.bits in (1, 2, 4, 8) and (bucket % 8 == 0 or numel <= bucket) \
                and native.enabled(levels):  # the decoder below in one pass (kernels.c)
            return native.dequantize(levels, self.bits, signs, numel, bucket, norms,
                                     self.s).to(dtype=dtype)
        if self.bits in (1, 2, 4, 8):  # each level as a float straight from a byte table
            levels = expand_codes(levels, numel, self.bits, torch.arange(2 ** self.bits,
                                  dtype=torch.float32, device=levels.device))
        else:
            levels = unpack_uint(levels, numel, self.bits, torch.int32)
        out = dequantize(norms, levels, signs, self.s, bucket, numel)
        return out.to(dtype=dtype)

    def __repr__(self):
        return f"{type(self).__name__}(s={self.s}, bucket_size={self.bucket_size})"
