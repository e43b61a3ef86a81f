"""QSGD with Elias coding: the sparse regime, where most levels are 0.

Alistarh et al., "QSGD: Communication-Efficient SGD via Gradient Quantization and Encoding",
NeurIPS 2017 (Sec. 3, efficient coding of the quantised vector). With few levels s the quantised bucket
has at most s(s + sqrt(n)) nonzeros in expectation (Lemma 3.1), so it pays to send, for each
nonzero only: the gap to the previous nonzero, the sign bit and the level, each integer >= 1
written with a universal integer code. The paper uses Elias (recursive) coding; we use the
simpler Elias *gamma* code (k >= 1 as floor(log2 k) zeros followed by k in binary), which is
also prefix-free and costs 2 floor(log2 k) + 1 bits.

Wire: one float32 norm per bucket + one uint8 bit stream: the number of nonzeros plus one,
then the triples, all gamma coded, then fewer than 8 bits of zero padding. The count (our
addition, 1 to 2 log2(n) + 1 bits) makes a stream cut short or extended by whole bytes
detectable: without it, a cut at a code boundary decodes silently into a tensor with the last
nonzeros missing.
"""
from __future__ import annotations

import numpy as np
import torch

from ..argspec import takes
from .base import Part, PayloadError, WireFormat, register
from .packing import pack_bits, unpack_bits
from .qsgd import (QSGD, dequantize, levels_arg, one_of_s_and_bits, quantize,
                   resolve_levels)


def _floor_log2(k: torch.Tensor) -> torch.Tensor:
    lg = torch.log2(k.double()).floor().long()
    lg = lg + ((1 << (lg + 1)) <= k).long()  # fix float rounding in either direction
    return lg - ((1 << lg) > k).long()


def elias_gamma_encode(values: torch.Tensor, raw_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Write ``values`` (int64) one after the other into a packed uint8 bit stream.

    Each value is Elias-gamma coded (must be >= 1), except where ``raw_mask`` is True: there it
    is written as a single raw bit (0 or 1), as QSGD does for signs.
    """
    v = values.reshape(-1).long()
    raw = torch.zeros_like(v, dtype=torch.bool) if raw_mask is None else raw_mask.reshape(-1)
    if (v[~raw] < 1).any():
        raise ValueError("Elias gamma codes integers >= 1 only")
    lg = torch.where(raw, torch.zeros_like(v), _floor_log2(v.clamp(min=1)))
    prefix = lg                          # leading zeros
    width = lg + 1                       # binary digits, most significant first
    lens = prefix + width
    starts = torch.cumsum(lens, 0) - lens
    bits = torch.zeros(int(lens.sum()), dtype=torch.bool, device=v.device)
    field = torch.repeat_interleave(torch.arange(v.numel(), device=v.device), width)
    first = torch.cumsum(width, 0) - width
    t = torch.arange(field.numel(), device=v.device) - first[field]
    pos = starts[field] + prefix[field] + t
    bits[pos] = ((v[field] >> (width[field] - 1 - t)) & 1).bool()
    return pack_bits(bits)


class StreamError(ValueError):
    """A bit stream that does not parse as the declared codes."""


def _gamma(text: str, pos: int) -> tuple[int, int]:
    """The gamma-coded integer starting at ``pos`` of a '0'/'1' string, and where it ends."""
    one = text.find("1", pos)
    end = 2 * one - pos + 1
    if one < 0 or end > len(text):
        raise StreamError(f"a code starting at bit {pos} runs past the stream's end")
    return int(text[one:end], 2), end


def elias_gamma_decode_qsgd(stream: torch.Tensor, numel: int | None = None):
    """Read the count, then that many (gap, sign bit, level) triples; the rest must be < 8
    bits of zero padding (else :class:`StreamError`, as for a code cut short, or more
    triples than ``numel`` values).

    Sequential by nature (each code's length depends on the bits before it); the scan runs on
    a '0'/'1' string so that finding the next 1 and parsing a number happen in C.
    """
    bits = unpack_bits(stream.cpu(), stream.numel() * 8).numpy().astype(np.uint8)
    text = (bits + ord("0")).tobytes().decode("ascii")
    count, pos = _gamma(text, 0)
    count -= 1
    if numel is not None and count > numel:
        raise StreamError(f"the stream announces {count} nonzeros for {numel} values")
    out = []
    for _ in range(count):
        gap, pos = _gamma(text, pos)
        if pos >= len(text):
            raise StreamError("a sign bit runs past the stream's end")
        neg = text[pos] == "1"
        level, pos = _gamma(text, pos + 1)
        out.append((gap, neg, level))
    if len(text) - pos >= 8 or "1" in text[pos:]:
        raise StreamError(f"{len(text) - pos} bits after the last code, expected < 8 zero "
                          "bits of padding")
    return out


@register("qsgd_elias")
@takes(s=levels_arg(2), rule=one_of_s_and_bits)  # its own default s; QSGD's other arguments
class QSGDElias(QSGD):
    """QSGD whose nonzero (gap, sign, level) triples are Elias-gamma coded into a bit stream."""
    fixed_size = False  # the Elias stream has a data-dependent length
    checks_in_decode = True  # the stream parsed in full: positions within n, levels in 1..s

    name = "qsgd_elias"
    wire = WireFormat(Part("norms", torch.float32, "buckets", "finite >= 0"),
                      Part("stream", torch.uint8,
                           "1..ceil((n + 1) * (2 * log2(n + 1) + 2 * log2(s) + 4) / 8)"),
                      where={"buckets": "ceil(n / bucket_size) (1 if bucket_size is None)"},
                      note="the stream: count + 1, then (gap, sign bit, level) per nonzero, "
                           "gamma coded; parsed and checked in full (gaps within n, levels "
                           "in 1..s, < 8 bits of zero padding)")

    def __init__(self, s: int | None = None, bucket_size: int | None = 512, seed: int = 0,
                 bits: int | None = None):
        # s resolved here (default 2; bits: s = 2**bits - 1, as for QSGD)
        super().__init__(s=resolve_levels(s, bits, 2), bucket_size=bucket_size, seed=seed)

    def encode(self, flat, key):
        norms, levels, neg = quantize(flat, self.s, self._bucket(flat.numel()),
                                      self.generator_for(flat.device))
        levels = levels.long()
        where = levels.nonzero().reshape(-1)
        gaps = torch.diff(where, prepend=where.new_full((1,), -1))  # 1-based gaps, all >= 1
        triples = torch.stack([gaps, neg[where].long(), levels[where]], dim=1)
        raw = torch.tensor([False, True, False], device=flat.device).expand_as(triples)
        values = torch.cat([where.new_full((1,), where.numel() + 1), triples.reshape(-1)])
        raw = torch.cat([raw.new_zeros(1), raw.reshape(-1)])
        return (norms, elias_gamma_encode(values, raw)), None

    def decode(self, payload, ctx, numel, dtype):
        norms, stream = payload
        try:
            triples = elias_gamma_decode_qsgd(stream, numel)
        except StreamError as err:
            raise PayloadError(self.name, "stream", "count + 1, the triples, < 8 zero bits",
                               str(err)) from None
        t = torch.tensor(triples, dtype=torch.int64).reshape(-1, 3)
        levels = torch.zeros(numel, dtype=torch.int64)
        neg = torch.zeros(numel, dtype=torch.bool)
        where = torch.cumsum(t[:, 0], 0) - 1
        if where.numel() and int(where[-1]) >= numel:
            raise PayloadError(self.name, "stream", f"positions < {numel}",
                               f"position {int(where[-1])}")
        if t.numel() and int(t[:, 2].max()) > self.s:
            raise PayloadError(self.name, "stream", f"levels in 1..{self.s}",
                               f"level {int(t[:, 2].max())}")
        levels[where], neg[where] = t[:, 2], t[:, 1].bool()
        dev = norms.device
        out = dequantize(norms, levels.to(dev), neg.to(dev), self.s, self._bucket(numel), numel)
        return out.to(dtype=dtype)
