"""TernGrad: stochastic ternary gradients {-s, 0, +s}, layer-wise scaler.

Wen, Xu, Yan, Wu, Wang, Chen, Li, "TernGrad: Ternary Gradients to Reduce Communication in
Distributed Deep Learning", NeurIPS 2017 (Sec. 3.1, the ternarize operator; Sec. 3.3,
layer-wise ternarizing and gradient clipping):

    s = max|g|,   b_i ~ Bernoulli(|g_i| / s),   g~ = s * sign(g) * b,    E[g~] = g

With gradient clipping (on by default, ``clip=2.5``) g is first clipped to
[-c sigma, c sigma], sigma the standard deviation of the tensor's entries; that shrinks s
and the variance, but makes g~ an unbiased estimate of the *clipped* gradient: pass
``clip=None`` for the unbiased quantiser. A constant tensor has sigma = 0; clipping it would
zero it, so clipping is skipped there (our choice; the paper does not treat this case).

One scaler per tensor (layer-wise, as in the paper when used with ``layerwise=True``
aggregation). The scaler *shared across workers* needs a collective (a max allreduce), so it
lives in the ``terngrad_shared`` aggregator. Wire: codes {0: 0, 1: +1, 2: -1} at 2 bits each
(ceil(n/4) bytes) + one float32 scaler.
"""
from __future__ import annotations

import math

import torch

from ..argspec import Arg, takes
from . import native, native_small
from .base import (Compressor, Part, WireFormat, check_finite, float32s, register,
                   round_stochastic)
from .fused import fused, on_device_path
from .packing import expand_codes, pack_uint
from .qsgd import _BLOCK, ratios, sums_of_squares
from .sign import negative


def std(x: torch.Tensor) -> torch.Tensor:
    """Population standard deviation of float32 ``x`` (0-d tensor), 0 for a constant tensor.

    sqrt(E[x^2] - E[x]^2) from two one-pass reductions (~5x ``torch.std`` on one CPU thread);
    where the mean is large enough for that subtraction to lose digits, ``torch.std``'s
    two-pass form instead."""
    n = x.numel()
    mean, rms = x.sum() / n, (sums_of_squares(x.reshape(1, -1))[0] / n).sqrt()
    if not mean.abs() <= 0.1 * rms:  # (also NaN) E[x]^2 > 1% of E[x^2]: cancellation
        sigma = x.std(unbiased=False)
        # a constant tensor's two-pass std is rounding noise (~1e-8 |mean|), not a spread
        return torch.where(sigma <= 1e-6 * mean.abs(), torch.zeros_like(sigma), sigma)
    return (rms.double() ** 2 - mean.double() ** 2).sqrt().float()


def std_from_sums(x: torch.Tensor, rows: torch.Tensor) -> float:
    """``float(std(x))`` for 1-D float32 ``x`` of fewer than 65536 values, given ``rows``, a
    float32 tensor of ``[x; x * x]`` (2, n) or of ``x * x`` (1, n) (a C pass,
    ``lab_absmax_squares``), in three or four torch ops instead of about twenty-five. The sums
    are torch's: with two rows one op sums each row as ``x.sum()`` sums x (torch's
    ``vectorized_inner_sum`` runs the same ``row_sum`` per row, serially below 32768 values in
    all), else two ops. The square root of the float32 mean square is torch's too (MKL's, not
    correctly rounded: Python's would differ in the last bit now and then); the divisions,
    products and the compare are Python floats rounded as :func:`std` rounds them (correctly
    rounded either way), the float64 root as :func:`~lab.compress.native_small.sqrt64_to_32`
    takes it; the tests compare. The cancellation case goes to std itself."""
    n = x.numel()
    if rows.shape[0] == 2 and 2 * n < 32768:
        total, squares = rows.sum(dim=1).tolist()
    else:
        total = x.sum().item()
        squares = (rows if rows.shape[0] == 1 else rows[1:]).sum(dim=1).item()
    mean = native_small.f32(total / n)
    rms = native_small.sqrt32(native_small.f32(squares / n))
    if not abs(mean) <= native_small.f32(native_small.f32(0.1) * rms):
        return float(std(x))
    return native_small.sqrt64_to_32(rms * rms - mean * mean)


def clip_bound(x: torch.Tensor, c: float | None) -> float | None:
    """c sigma for float32 ``x``, or None where nothing is clipped (c None, sigma 0, < 2 values)."""
    if c is None or x.numel() < 2:
        return None
    sigma = float(std(x))
    return c * sigma if sigma > 0 else None


def clip_sigma(x: torch.Tensor, c: float | None) -> torch.Tensor:
    """Clip float32 ``x`` to [-c sigma, c sigma] (no-op when c is None or sigma == 0)."""
    bound = clip_bound(x, c)
    return x if bound is None else x.clamp(-bound, bound)


def ternarize(x: torch.Tensor, s: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Stochastic ternary codes (uint8 in {0: 0, 1: +1, 2: -1}) of float32 ``x`` with scaler
    ``s``, values beyond +-s taken as +-s; ``generator`` lives on ``x``'s device. Readable form:
    ``where(rand < |x|/s, where(x < 0, 2, 1), 0)``; here code = keep << negative."""
    if float(s) == 0.0:
        return torch.zeros(x.numel(), dtype=torch.uint8, device=x.device)
    if on_device_path(x):  # one uniform per value is cheap on a GPU; fuse the chain
        return ternary_codes(x, s, torch.rand(x.shape, generator=generator, device=x.device))
    if native.enabled(x):  # the same codes in one pass (kernels.c)
        return native.stochastic_levels(x.reshape(-1), max(x.numel(), 1), s.reshape(1), 1,
                                        generator, signed_codes=True)
    r256 = ratios(x.reshape(1, -1), s.reshape(1), 256).clamp_(max=256).reshape(-1)  # 256|g_i|/s
    keep = round_stochastic(r256, 1, generator)  # b_i ~ Bernoulli(|g_i| / s)
    return keep.bitwise_left_shift_(negative(x).view(torch.uint8))


@fused
def ternary_codes(x, s, u):
    """Codes keep << negative, keep = u < |x| / s (u uniform in [0, 1))."""
    keep = (u < x.abs() / s).to(dtype=torch.uint8)
    return keep << (x < 0).to(dtype=torch.uint8)


_TERNARY = torch.tensor([0.0, 1.0, -1.0, 0.0])  # the value of each 2-bit code (3 is unused)


def ternary_values(codes: torch.Tensor) -> torch.Tensor:
    """float32 t in {0, +1, -1} for codes {0, 1, 2}: t = (code & 1) - (code >> 1)."""
    codes = codes.to(dtype=torch.uint8)
    return (codes & 1).float().sub_((codes >> 1).float())


#: TernGrad's clipping, c in c * sigma: a finite number > 0, or None (no clipping)
CLIP = Arg(float, gt=0, none=True, help="clip at c standard deviations (None: no clipping)")


def check_clip(clip, owner: str = "") -> float | None:
    """``clip`` (:data:`CLIP`) as a float, or None."""
    return None if CLIP.check(clip, "clip", owner) is None else float(clip)


@register("terngrad")
@takes(clip=CLIP)
class TernGrad(Compressor):
    """Ternary stochastic quantiser with a per-tensor scaler and optional c-sigma clipping."""
    fixed_size = True
    checks_finite = True  # through its scaler max |x|

    name = "terngrad"
    wire = WireFormat(Part("scale", torch.float32, "1", "finite >= 0"),
                      Part("codes", torch.uint8, "ceil(n / 4)"),
                      note="2-bit codes 0: 0, 1: +scale, 2: -scale (3 is unused and decodes to 0)")

    def __init__(self, clip: float | None = 2.5, seed: int = 0):
        self.clip = None if clip is None else float(clip)
        super().__init__(seed=seed)

    def encode_plain(self, x, key):
        payload = self._encode_small(x, x.numel()) if x.dim() == 1 and x.numel() else None
        return None if payload is None else (payload, None)

    def _encode_small(self, x, n: int):
        """:meth:`encode`'s payload for a plain 1-D float32 ``x`` of ``n`` > 0 values: max |x|
        and the squares in one C pass, torch's sums for sigma (:func:`std_from_sums`; std
        itself from 65536 values), the codes drawn and packed in one C pass with the
        generator as :func:`ternarize` draws. None (nothing drawn) for the general route:
        NaN/Inf (it raises), an all-zero x (torch's max may keep a -0.0 scale there)."""
        clip = self.clip is not None and n >= 2
        # rows [x; x * x] (one torch op sums both) below 16384 values, [x * x] up to 65535
        both = 2 * n < 32768
        rows = native_small.scratch(2 if both else 1, n) if clip and n < _BLOCK else None
        copy = squares = None
        if rows is not None:
            copy = rows.data_ptr() if both else None
            squares = rows.data_ptr() + 4 * n if both else rows.data_ptr()  # the last row
        top = native_small.K.lab_absmax_squares(x.data_ptr(), n, copy, squares)
        if not (math.isfinite(top) and top > 0):
            return None
        s = top
        if clip:
            sigma = float(std(x)) if rows is None else std_from_sums(x, rows)
            bound = native_small.f32(self.clip * sigma) if sigma > 0 else math.inf
            s = bound if bound < s else s  # torch compares the bound in float32, keeps it so
        if s == 0.0:  # a bound below float32's range
            return float32s(s), torch.zeros((n + 3) // 4, dtype=torch.uint8)
        codes = native_small.BYTES.new_empty((n + 3) // 4)
        native_small.K.lab_ternary_codes(x.data_ptr(), n, s, native_small.key(self.generator),
                                         codes.data_ptr())
        return float32s(s), codes

    def decode_plain(self, payload, n):
        # a finite scale >= 0 and ceil(n / 4) code bytes: one C call
        got = native_small.parts(payload, (torch.float32, 1), (torch.uint8, (n + 3) // 4))
        if got is not None:
            s, codes = got
            v = s.item()
            if math.isfinite(v) and v >= 0:
                out = native_small.FLOATS.new_empty(n)
                native_small.K.lab_expand_ternary(codes.data_ptr(), n, v, out.data_ptr())
                return out
        return None

    def encode(self, flat, key):
        if native_small.plain(flat) and flat.numel():
            payload = self._encode_small(flat, flat.numel())
            if payload is not None:
                return payload, None
        x = flat.float()
        s = x.new_zeros(())
        if x.numel():
            lo, hi = torch.aminmax(x)  # max |x| in one pass, no |x| tensor
            s = torch.maximum(hi, -lo)
            if not torch.isfinite(s):
                check_finite(flat, self.name)  # NaN/Inf
            bound = clip_bound(x, self.clip)  # clipping to +-c sigma makes s = min(s, c sigma)
            if bound is not None and bound < s:
                s = s.new_tensor(bound)
        codes = ternarize(x, s, self.generator_for(x.device))  # saturates beyond +-s
        return (s.reshape(1), pack_uint(codes, 2, check=False)), None

    def decode(self, payload, ctx, numel, dtype):
        s, packed = payload
        if s.is_cpu and native.enabled(packed) and packed.is_contiguous():  # one C pass
            v = s.item()  # the table's products in Python floats: the same float32 values
            out = native.expand_codes2(packed, numel, (0.0 * v, v, -1.0 * v, 0.0 * v))
            return out if dtype is torch.float32 else out.to(dtype=dtype)
        # readable form: ternary_values(unpack_uint(packed, numel, 2)) * s; read from a table
        # of the four products instead (the same values, one pass)
        return expand_codes(packed, numel, 2, _TERNARY.to(s.device) * s.float()).to(dtype=dtype)

    def __repr__(self):
        return f"TernGrad(clip={self.clip})"
