"""Bit packing: the helpers that make payloads as small on the wire as on paper.

A trap in public code is sending one sign per byte (8x too big) or int64 indices priced as
4 bytes. Here ``pack_bits`` puts 8 booleans in a byte and ``pack_uint`` puts ``bits``-bit codes
into a dense bit stream, so ``wire_bytes`` of a payload is the honest count.
"""
from __future__ import annotations

import torch

_WEIGHTS = torch.tensor([1, 2, 4, 8, 16, 32, 64, 128], dtype=torch.uint8)


def packed_size(numel: int, bits: int = 1) -> int:
    """Bytes needed for ``numel`` codes of ``bits`` bits each: ceil(numel * bits / 8)."""
    return (numel * bits + 7) // 8


def pack_bits(mask: torch.Tensor) -> torch.Tensor:
    """Pack a boolean tensor into uint8, 8 entries per byte (little-endian bit order)."""
    flat = mask.reshape(-1).to(torch.uint8)
    pad = (-flat.numel()) % 8
    if pad:
        flat = torch.cat([flat, flat.new_zeros(pad)])
    weights = _WEIGHTS.to(flat.device)
    return (flat.view(-1, 8) * weights).sum(dim=1, dtype=torch.int32).to(torch.uint8)


def unpack_bits(packed: torch.Tensor, numel: int) -> torch.Tensor:
    """Inverse of :func:`pack_bits`: the first ``numel`` booleans."""
    if packed.dtype != torch.uint8:
        raise TypeError(f"packed must be uint8, got {packed.dtype}")
    weights = _WEIGHTS.to(packed.device)
    bits = (packed.reshape(-1, 1) & weights) != 0
    return bits.reshape(-1)[:numel]


def pack_uint(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack non-negative integer codes < 2**bits into a dense bit stream of uint8."""
    if not 1 <= bits <= 32:
        raise ValueError(f"bits must be in [1, 32], got {bits}")
    codes = codes.reshape(-1).to(torch.int64)
    if codes.numel() and (codes.min() < 0 or codes.max() >= 2 ** bits):
        raise ValueError(f"codes must lie in [0, 2**{bits}) to pack with bits={bits}")
    if bits == 8:
        return codes.to(torch.uint8)
    shifts = torch.arange(bits, device=codes.device)
    planes = (codes.unsqueeze(1) >> shifts) & 1  # (n, bits), least significant bit first
    return pack_bits(planes.bool())


def unpack_uint(packed: torch.Tensor, numel: int, bits: int) -> torch.Tensor:
    """Inverse of :func:`pack_uint`; returns int64 codes."""
    if bits == 8:
        return packed[:numel].to(torch.int64)
    planes = unpack_bits(packed, numel * bits).view(numel, bits).to(torch.int64)
    shifts = torch.arange(bits, device=packed.device)
    return (planes << shifts).sum(dim=1)


def index_dtype(numel: int) -> torch.dtype:
    """int32 while every index fits (n < 2**31), int64 only beyond: never int64 silently."""
    return torch.int32 if numel < 2 ** 31 else torch.int64
