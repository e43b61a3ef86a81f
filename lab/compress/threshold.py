"""Threshold quantization (Strom): send only entries beyond a fixed threshold, as +-tau.

Strom, "Scalable Distributed DNN Training Using Commodity GPU Cloud Computing", Interspeech
2015, Sec. 2: the residual r (gradient plus what was not sent before) is scanned; every entry
with |r_i| > tau is sent as its index and one sign bit, meaning +tau or -tau, and tau is
subtracted from (added to) the residual; everything else stays in the residual. The residual
is :class:`~lab.compress.ErrorFeedback`'s job: ``"strom"`` is ``ErrorFeedback(Threshold(tau))``,
``"threshold"`` the bare quantizer.

Wire format: ``(indices int32, packed sign bits)``, 4 B + 1 bit per sent entry. ``tau`` is a
configuration constant that every rank shares, so it is *not* on the wire (decode uses the
codec's own ``tau``); ranks must therefore be built with the same ``tau``. The count is
data-dependent (ragged): anything from 0 to n entries.
"""
from __future__ import annotations

import torch

from ..argspec import SEED, Arg, takes
from . import native, native_small
from .base import Compressor, Part, WireFormat, register
from .error_feedback import ErrorFeedback
from .packing import index_dtype, pack_bits, unpack_bits
from .wire import min_max, range_error


#: the threshold, also the magnitude sent: a float32 (finite, > 0)
TAU = Arg(float, gt=0, le=3.4028234663852886e38, help="threshold and sent magnitude")


@register("threshold")
@takes(tau=TAU)
class Threshold(Compressor):
    """Entries with ``|x| > tau`` become ``sign(x) * tau``; the rest become 0."""

    name = "threshold"
    wire = WireFormat(Part("indices", "index", "c", "0..n - 1"),
                      Part("signs", torch.uint8, "ceil(c / 8)"), counts={"c": "0..n"})

    def __init__(self, tau: float = 0.01, seed: int = 0):
        self.tau = float(tau)
        super().__init__(seed=seed)

    def encode_plain(self, x, key):
        # counted (NaN/Inf found in that pass: the general route raises), then indexed and
        # the signs packed: two C passes, no separate finiteness pass
        n = x.numel()
        count = native_small.K.lab_threshold_count(x.data_ptr(), n, self.tau)
        if count < 0:
            return None
        idx = native_small.INTS.new_empty(count)
        signs = native_small.BYTES.new_empty((count + 7) // 8)
        native_small.K.lab_threshold_fill(x.data_ptr(), n, self.tau, idx.data_ptr(),
                                          signs.data_ptr())
        return (idx, signs), None

    def decode_plain(self, payload, n):
        # c int32 indices, c <= n, and ceil(c / 8) sign bytes; each index checked in the C
        # scatter's pass
        got = native_small.parts(payload, (torch.int32, None), (torch.uint8, None))
        if got is not None and n < 2 ** 31:
            idx, signs = got
            c = idx.numel()
            if c <= n and signs.numel() == (c + 7) // 8:
                out = native_small.FLOATS.new_empty(n)
                if native_small.K.lab_scatter_signs(idx.data_ptr(), signs.data_ptr(), c, n,
                                                    self.tau, out.data_ptr()):
                    raise range_error(self.name, self.wire.parts[0], n, idx)
                return out
        return None

    def encode(self, flat, key):
        idx = torch.where(flat.abs() > self.tau)[0]
        signs = pack_bits(flat[idx] > 0)  # |x| > tau > 0, so no sign(0) ambiguity
        return (idx.to(dtype=index_dtype(flat.numel())), signs), None

    decode_checks = ("indices",)  # checked in the scatter's own pass (:meth:`decode`)

    def decode(self, payload, ctx, numel, dtype):
        """``+-tau`` scattered into zeros; every index checked against ``0..n - 1`` first (on
        the CPU in the C scatter's own pass, :func:`~lab.compress.native.scatter`)."""
        idx, packed = payload
        if (dtype is torch.float32 and idx.dtype is torch.int32 and native.enabled(packed)
                and idx.is_contiguous() and packed.is_contiguous()):
            # the same values: +-tau rounded to float32 as torch.full rounds them
            vals = native.expand_pair(packed, idx.numel(), -self.tau, self.tau)
            out = native.scatter(vals, idx, numel)
            if out is None:
                raise range_error(self.name, self.wire.parts[0], numel, idx)
            return out
        if idx.numel():
            lo, hi = min_max(idx)
            if lo < 0 or hi >= numel:
                raise range_error(self.name, self.wire.parts[0], numel, idx)
        out = torch.zeros(numel, dtype=dtype, device=packed.device)
        if idx.numel():
            pos = unpack_bits(packed, idx.numel())
            vals = torch.full((idx.numel(),), -self.tau, dtype=dtype, device=packed.device)
            vals[pos] = self.tau
            out[idx.long()] = vals
        return out

    def __repr__(self):
        return f"Threshold(tau={self.tau})"


@register("strom")
@takes(tau=TAU, seed=SEED)
def strom(tau: float = 0.01, seed: int = 0) -> ErrorFeedback:
    """Strom (2015) as published: threshold quantization with a local residual."""
    ef = ErrorFeedback(Threshold(tau=tau, seed=seed))
    ef.name = "strom"
    return ef
