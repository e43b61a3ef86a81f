"""QSGD with Elias coding: the sparse regime, where most levels are 0.

Alistarh et al., "QSGD: Communication-Efficient SGD via Gradient Quantization and Encoding",
NeurIPS 2017 (Sec. 3, efficient coding of the quantised vector). With few levels s the quantised bucket
has at most s(s + sqrt(n)) nonzeros in expectation (Lemma 3.1), so it pays to send, for each
nonzero only: the gap to the previous nonzero, the sign bit and the level, each integer >= 1
written with a universal integer code. The paper uses Elias (recursive) coding; we use the
simpler Elias *gamma* code (k >= 1 as floor(log2 k) zeros followed by k in binary), which is
also prefix-free and costs 2 floor(log2 k) + 1 bits.

Wire: one float32 norm per bucket + one uint8 bit stream (the tail of its last byte is zero
padding, which the decoder recognises because every gamma code contains a 1).
"""
from __future__ import annotations

import numpy as np
import torch

from .base import register
from .packing import pack_bits, unpack_bits
from .qsgd import QSGD, dequantize, quantize


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


def elias_gamma_decode_qsgd(stream: torch.Tensor):
    """Read (gap, sign bit, level) triples until the stream holds no more codes.

    Sequential by nature (each code's length depends on the bits before it); the scan runs on
    a '0'/'1' string so that finding the next 1 and parsing a number happen in C.
    """
    bits = unpack_bits(stream.cpu(), stream.numel() * 8).numpy().astype(np.uint8)
    text = (bits + ord("0")).tobytes().decode("ascii")
    out, pos = [], 0
    while True:
        one = text.find("1", pos)
        if one < 0:
            break  # only the zero padding of the last byte is left
        end = 2 * one - pos + 1
        gap = int(text[one:end], 2)
        neg = text[end] == "1"
        one = text.find("1", end + 1)
        stop = 2 * one - (end + 1) + 1
        out.append((gap, neg, int(text[one:stop], 2)))
        pos = stop
    return out


@register("qsgd_elias")
class QSGDElias(QSGD):
    """QSGD whose nonzero (gap, sign, level) triples are Elias-gamma coded into a bit stream."""
    fixed_size = False  # the Elias stream has a data-dependent length

    name = "qsgd_elias"

    def __init__(self, s: int = 2, bucket_size: int | None = 512, seed: int = 0):
        super().__init__(s=s, bucket_size=bucket_size, seed=seed)

    def encode(self, flat, key):
        norms, levels, neg = quantize(flat, self.s, self._bucket(flat.numel()),
                                      self.generator_for(flat.device))
        levels = levels.long()
        where = levels.nonzero().reshape(-1)
        gaps = torch.diff(where, prepend=where.new_full((1,), -1))  # 1-based gaps, all >= 1
        triples = torch.stack([gaps, neg[where].long(), levels[where]], dim=1)
        raw = torch.tensor([False, True, False], device=flat.device).expand_as(triples)
        return (norms, elias_gamma_encode(triples, raw)), None

    def decode(self, payload, ctx, numel, dtype):
        norms, stream = payload
        triples = elias_gamma_decode_qsgd(stream)
        t = torch.tensor(triples, dtype=torch.int64).reshape(-1, 3)
        levels = torch.zeros(numel, dtype=torch.int64)
        neg = torch.zeros(numel, dtype=torch.bool)
        where = torch.cumsum(t[:, 0], 0) - 1
        if where.numel() and int(where[-1]) >= numel:
            raise ValueError(f"qsgd_elias: stream addresses position {int(where[-1])} "
                             f"but the tensor has {numel} values")
        levels[where], neg[where] = t[:, 2], t[:, 1].bool()
        dev = norms.device
        out = dequantize(norms, levels.to(dev), neg.to(dev), self.s, self._bucket(numel), numel)
        return out.to(dtype)
