"""Bit packing: the helpers that make payloads as small on the wire as on paper.

A trap in public code is sending one sign per byte (8x too big) or int64 indices priced as
4 bytes. Here ``pack_bits`` puts 8 booleans in a byte and ``pack_uint`` puts ``bits``-bit codes
into a dense bit stream, so ``wire_bytes`` of a payload is the honest count.

Layout (the same on every device and path): little-endian bit order inside a byte, and code j
of ``bits`` bits occupies stream bits ``[j * bits, (j + 1) * bits)``, least significant first.
``pack_bits_reference`` / ``pack_uint_reference`` (and their inverses) are the readable
versions; the fast paths (numpy's C ``packbits`` on the CPU, whole-byte shifts for 1, 2, 4 and 8
bits on any device) are tested equal to them bit for bit.
"""
from __future__ import annotations

import sys

import numpy as np
import torch

from . import device, native

_WEIGHTS = torch.tensor([1, 2, 4, 8, 16, 32, 64, 128], dtype=torch.uint8)


def packed_size(numel: int, bits: int = 1) -> int:
    """Bytes needed for ``numel`` codes of ``bits`` bits each: ceil(numel * bits / 8)."""
    return (numel * bits + 7) // 8


# -- readable references -------------------------------------------------------------------
def pack_bits_reference(mask: torch.Tensor) -> torch.Tensor:
    """Pack a boolean tensor into uint8, 8 entries per byte: byte = sum_i b_i 2^i."""
    flat = mask.reshape(-1).to(dtype=torch.uint8)
    pad = (-flat.numel()) % 8
    if pad:
        flat = torch.cat([flat, flat.new_zeros(pad)])
    weights = _WEIGHTS.to(flat.device)
    return (flat.view(-1, 8) * weights).sum(dim=1, dtype=torch.int32).to(dtype=torch.uint8)


def unpack_bits_reference(packed: torch.Tensor, numel: int) -> torch.Tensor:
    """The first ``numel`` bits of ``packed`` as bools, with plain torch ops: the reference
    the fast :func:`unpack_bits` is tested against."""
    bits = (packed.reshape(-1, 1) & _WEIGHTS.to(packed.device)) != 0
    return bits.reshape(-1)[:numel]


def pack_uint_reference(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """One bit plane per code bit (least significant first), then :func:`pack_bits`."""
    shifts = torch.arange(bits, device=codes.device)
    planes = (codes.reshape(-1, 1).to(dtype=torch.int64) >> shifts) & 1  # (n, bits)
    return pack_bits_reference(planes.bool())


def unpack_uint_reference(packed: torch.Tensor, numel: int, bits: int) -> torch.Tensor:
    """The ``numel`` codes of ``bits`` bits in ``packed`` as int64, one bit plane at a time:
    the reference the fast :func:`unpack_uint` is tested against."""
    planes = unpack_bits_reference(packed, numel * bits).view(numel, bits).to(dtype=torch.int64)
    return (planes << torch.arange(bits, device=packed.device)).sum(dim=1)


# -- the fast paths the codecs use ---------------------------------------------------------
def pack_bits(mask: torch.Tensor) -> torch.Tensor:
    """Pack a boolean tensor into uint8, 8 entries per byte (little-endian bit order)."""
    flat = mask.reshape(-1)
    if flat.dtype != torch.bool:
        flat = flat != 0
    if flat.is_cpu:  # numpy's packbits is one C loop: ~10x the torch reference
        return torch.from_numpy(np.packbits(flat.contiguous().numpy(), bitorder="little"))
    if device.usable(flat):  # one fused kernel on a GPU
        return device.pack_codes(flat.view(torch.uint8), 1)
    return _pack_small(flat.view(torch.uint8), 1)


def unpack_bits(packed: torch.Tensor, numel: int) -> torch.Tensor:
    """Inverse of :func:`pack_bits`: the first ``numel`` booleans."""
    if packed.dtype != torch.uint8:
        raise TypeError(f"packed must be uint8, got {packed.dtype}")
    numel = min(numel, packed.numel() * 8)
    if packed.is_cpu:
        out = np.unpackbits(packed.reshape(-1).contiguous().numpy(), count=numel,
                            bitorder="little")
        return torch.from_numpy(out).view(torch.bool)
    return _unpack_small(packed, numel, 1).view(torch.bool)


# the codes of every byte value, for 1-, 2-, 4- and 8-bit codes: (256, 8 // bits)
_BYTE_CODES = {bits: unpack_uint_reference(torch.arange(256, dtype=torch.uint8), 2048 // bits, bits)
               .view(256, 8 // bits) for bits in (1, 2, 4, 8)}


def expand_codes(packed: torch.Tensor, numel: int, bits: int, values: torch.Tensor):
    """``values[code]`` for the first ``numel`` ``bits``-bit codes in ``packed`` (``values``:
    1-D, 2**bits entries), i.e. ``values[unpack_uint(packed, numel, bits)]``, by table.

    A byte has 256 values, so the 8 // bits outputs of every byte are read from a 256-row
    table in one gather (numpy's ``take``: ~5x unpacking and indexing on the CPU, and no
    codes tensor in between); on a GPU, where elementwise passes are cheap, unpack and index."""
    if bits not in _BYTE_CODES:
        raise ValueError(f"bits must be 1, 2, 4 or 8 to expand by table, got {bits}")
    if not packed.is_cpu:
        if device.usable(packed, packed.numel() * 8) and numel <= packed.numel() * 8 // bits:
            return device.expand_table(packed.reshape(-1), values.to(packed.device), bits)[:numel]
        return values.to(packed.device)[unpack_uint(packed, numel, bits)]
    table = values.cpu()[_BYTE_CODES[bits]]
    out = np.take(table.numpy(), packed.reshape(-1).contiguous().numpy(), axis=0)
    return torch.from_numpy(out.reshape(-1)[:numel])


def expand_bits(packed: torch.Tensor, numel: int, one: torch.Tensor, zero: torch.Tensor):
    """``where(unpack_bits(packed), one, zero)`` for scalar tensors ``one``/``zero``: by table
    (:func:`expand_codes`; one pass instead of three; on a GPU one fused kernel)."""
    dtype = torch.promote_types(one.dtype, zero.dtype)
    if dtype == torch.float32 and native.enabled(packed):  # one vectorized pass (kernels.c)
        return native.expand_bits(packed, numel, max(numel, 1), torch.stack([zero, one]).float())
    if not packed.is_cpu:  # the table's two entries, by the device path where it applies
        return expand_codes(packed, numel, 1, torch.stack([zero.to(dtype=dtype), one.to(dtype=dtype)]))
    return expand_codes(packed, numel, 1, torch.stack([zero.to(dtype=dtype), one.to(dtype=dtype)]))


def _pack_small(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """uint8 codes of 1, 2 or 4 bits: 8 // bits codes to a byte, or'ed in at their offsets."""
    per = 8 // bits
    pad = (-codes.numel()) % per
    if pad:
        codes = torch.cat([codes, codes.new_zeros(pad)])
    if bits in (2, 4) and sys.byteorder == "little":
        return _gather(codes, bits)
    cols = codes.view(-1, per)
    out = cols[:, 0].clone()
    for j in range(1, per):  # a loop over bit offsets (<= 8), never over elements
        out |= cols[:, j] << (j * bits)
    return out


def _unpack_small(packed: torch.Tensor, numel: int, bits: int) -> torch.Tensor:
    if bits in (2, 4) and sys.byteorder == "little":
        return _spread(packed.reshape(-1), bits)[:numel]
    shifts = torch.arange(0, 8, bits, dtype=torch.uint8, device=packed.device)
    return ((packed.reshape(-1, 1) >> shifts) & ((1 << bits) - 1)).reshape(-1)[:numel]


def _gather(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Inverse of :func:`_spread`: the codes of 8 // bits consecutive bytes into one byte.

    Two bytes (b0, b1) viewed as one little-endian int16 w = b0 + 256 b1 give
    ``w | w >> 4`` = b0 | b1 << 4 in the low byte (4-bit codes; 2-bit: four bytes, an int32,
    shifts of 6, 12 and 18); the cast to uint8 keeps that byte. 2-4x the strided or of
    columns, the same bits."""
    if not codes.numel():
        return codes.new_zeros(0)
    codes = codes.contiguous()
    if codes.storage_offset() % (8 // bits):  # a wide view needs an aligned start
        codes = codes.clone()
    if bits == 4:
        w = codes.view(torch.int16)
        return (w | (w >> 4)).to(dtype=torch.uint8)
    w = codes.view(torch.int32)
    return (w | (w >> 6) | (w >> 12) | (w >> 18)).to(dtype=torch.uint8)


def _spread(packed: torch.Tensor, bits: int) -> torch.Tensor:
    """Each byte's 8 // bits codes moved into bytes of their own, in one wide integer.

    A byte b widened to int16 holds codes (b & 15, b >> 4); ``(b | b << 4) & 0x0F0F`` puts the
    first in the low byte and the second in the high byte, which a little-endian view reads in
    that order (2 bits: int32, four bytes). 3-6x faster on the CPU than shifting a broadcast
    (n, 8 // bits) view; the same bits as the reference."""
    if bits == 4:
        p = packed.to(dtype=torch.int16)
        wide = (p | (p << 4)) & 0x0F0F
    else:
        p = packed.to(dtype=torch.int32)
        wide = (p | (p << 6) | (p << 12) | (p << 18)) & 0x03030303
    return wide.view(torch.uint8)


def pack_uint(codes: torch.Tensor, bits: int, check: bool = True) -> torch.Tensor:
    """Pack non-negative integer codes < 2**bits into a dense bit stream of uint8.

    ``check=False`` skips the range check (one pass over the codes) for codes that are in
    range by construction; out-of-range codes would then be packed wrongly."""
    if not 1 <= bits <= 32:
        raise ValueError(f"bits must be in [1, 32], got {bits}")
    codes = codes.reshape(-1)
    if check and codes.numel():
        lo, hi = torch.aminmax(codes)
        if int(lo) < 0 or int(hi) >= 2 ** bits:
            raise ValueError(f"codes must lie in [0, 2**{bits}) to pack with bits={bits}")
    if bits == 8:
        return codes.to(dtype=torch.uint8)
    if bits in (1, 2, 4):
        if device.usable(codes, codes.numel() * bits):  # whole bytes: one fused kernel on a GPU
            return device.pack_codes(codes.to(dtype=torch.uint8), bits)
        return _pack_small(codes.to(dtype=torch.uint8), bits)
    if codes.dtype != torch.int64 and bits < 31:
        codes = codes.to(dtype=torch.int32)  # narrow planes: half the memory traffic of int64
    shifts = torch.arange(bits, device=codes.device, dtype=codes.dtype if bits < 31 else torch.int64)
    planes = (codes.unsqueeze(1).to(shifts.dtype) >> shifts) & 1  # (n, bits), LSB first
    return pack_bits(planes.to(dtype=torch.bool))


def unpack_uint(packed: torch.Tensor, numel: int, bits: int,
                dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """Inverse of :func:`pack_uint`; codes in ``dtype`` (int64 unless asked otherwise)."""
    if bits == 8:
        return packed[:numel].to(dtype=dtype)
    if bits in (1, 2, 4):
        return _unpack_small(packed, numel, bits).to(dtype=dtype)
    planes = unpack_bits(packed, numel * bits).view(numel, bits)
    wide = torch.int64 if bits >= 31 else torch.int32
    shifts = torch.arange(bits, device=packed.device, dtype=wide)
    return (planes.to(dtype=wide) << shifts).sum(dim=1, dtype=wide).to(dtype=dtype)


def index_dtype(numel: int) -> torch.dtype:
    """int32 while every index fits (n < 2**31), int64 only beyond: never int64 silently."""
    return torch.int32 if numel < 2 ** 31 else torch.int64
