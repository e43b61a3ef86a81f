"""The compressor contract shared by every codec in :mod:`lab.compress`.

A codec turns a tensor into a *payload*, the tuple of tensors that crosses the wire, already
packed, plus a *ctx* that never leaves the rank (shape, dtype, indices a peer already knows...).

``allreduce_compatible`` declares that payloads of different ranks may be summed element-wise
by an allreduce and that decompressing the sum gives the sum of the decompressed tensors
(fp16 casts, Random-k with a shared seed, count sketches). Codecs without it travel by
allgather or through a server, and then any rank must be able to decode any other rank's
payload of the same tensor with its own ctx: such a ctx may hold only what all ranks share
(shape, dtype, a shared seed), so the payload must carry everything else (values *and* indices).

Every codec declares its payload in ``wire``, a :class:`~lab.compress.wire.WireFormat` next to
its ``encode``: the parts, each part's dtype and length as a function of the tensor's size and
the codec's parameters (exact where fixed, bounds where it varies), and the range of entries
that address memory or scale the output (indices, norms, headers). ``decompress`` and
``decompress_into`` check a payload against it before decoding (:meth:`Compressor.check_payload`)
and raise :class:`~lab.compress.wire.PayloadError` on a mismatch: a peer's bug, a version
mismatch or a corrupted transfer is named, never decoded into a wrong tensor. The checks are
shapes, dtypes and one min/max of index and header parts, run from a plan kept per tensor size;
a decoder that reads an index part anyway (the sparse codecs' C scatter) tests its range in
that pass instead (``Compressor.decode_checks``). ``python -m lab bench codecs --checks``
measures them.
"""
from __future__ import annotations

import math
import struct
from typing import Any, Sequence

import numpy as np
import torch

from ..argspec import SEED, Arg, takes
from ..registry import Registry
from . import native_small
from .wire import Part, PayloadError, WireFormat

#: A payload is a ``tuple[torch.Tensor, ...]``: exactly what crosses the wire, already packed.
Payload = tuple

#: Every codec by name: ``REGISTRY.names()``, ``REGISTRY.make(name, ...)``.
REGISTRY = Registry("compressor")
register = REGISTRY.register


def wire_bytes(payload: Sequence[torch.Tensor]) -> int:
    """Bytes a payload occupies on the wire (sum over its tensors)."""
    return sum(t.numel() * t.element_size() for t in payload)


def check_finite(tensor: torch.Tensor, who: str) -> None:
    """Refuse NaN/Inf: a codec must never silently turn them into signs or zeros."""
    if not (tensor.is_floating_point() and tensor.numel()):
        return
    lo, hi = torch.aminmax(tensor)  # min/max propagate NaN; ~30x cheaper than isfinite().all()
    if not all_finite(lo, hi):
        raise FloatingPointError(f"{who}: input tensor contains NaN or Inf; refusing to compress")


def all_finite(lo: torch.Tensor, hi: torch.Tensor) -> bool:
    """Whether both scalars are finite, with one device sync (0 * Inf and 0 * NaN are NaN);
    on the CPU read as Python floats (two reads instead of four torch ops: ~10 us less a call
    on a small tensor)."""
    if lo.is_cpu:
        return math.isfinite(lo.item()) and math.isfinite(hi.item())
    return bool(torch.isfinite(lo * 0 + hi * 0))


def float32s(*values: float) -> torch.Tensor:
    """A new 1-D float32 CPU tensor of ``values`` (Python floats already rounded to float32,
    e.g. by ``ctypes.c_float``; Inf allowed): what ``torch.tensor(values, dtype=float32)``
    gives, built from their bytes (~1 us instead of ~4: a header part on a small tensor)."""
    packer = _FLOAT32S.get(len(values)) or _FLOAT32S.setdefault(
        len(values), struct.Struct(f"<{len(values)}f"))  # a format string parsed once
    return torch.frombuffer(bytearray(packer.pack(*values)), dtype=torch.float32)


_FLOAT32S: dict = {}


def check_int(name: str, value, minimum: int = 1, allow_none: bool = False, owner: str = ""):
    """Validate an integer argument, naming it in the error (bools are not ints here): an
    :class:`~lab.argspec.Arg` ``(int, ge=minimum)`` checked at once, for a helper that is not
    itself a declared factory."""
    return Arg(int, ge=minimum, none=allow_none).check(value, name, owner)


def device_generator(cpu: torch.Generator, cache: dict, device: torch.device) -> torch.Generator:
    """``cpu`` itself on the CPU, else a generator on ``device`` seeded with ``cpu``'s
    initial seed (kept in ``cache``, so its stream continues from call to call)."""
    if device.type == "cpu":
        return cpu
    if device not in cache:
        cache[device] = torch.Generator(device=device).manual_seed(cpu.initial_seed())
    return cache[device]


def random_bytes(n: int, generator: torch.Generator, device) -> torch.Tensor:
    """``n`` uniform random bytes (uint8) drawn on ``device``.

    Drawn as full-range 64-bit words and viewed as bytes: one generator call per 8 bytes,
    about 8x cheaper on the CPU than one call per element (``torch.rand``)."""
    words = torch.empty(-(-n // 8), dtype=torch.int64, device=device)
    words.random_(-2 ** 63, None, generator=generator)
    return words.view(torch.uint8)[:n]


def bernoulli(p: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Boolean draws with P(True) = ``p`` (float32, in [0, 1]), on ``p``'s device: the
    stochastic rounding of ``p`` (:func:`round_stochastic`, top level 1).
    Reference: ``torch.rand(p.shape) < p`` (same distribution)."""
    return round_stochastic(p * 256, 1, generator).view(torch.bool).view(p.shape)


def round_stochastic(r256: torch.Tensor, top: int, generator: torch.Generator) -> torch.Tensor:
    """Unbiased stochastic rounding of ``r = r256 / 256`` to uint8 levels: ``floor(r) + 1`` with
    probability ``r - floor(r)``, else ``floor(r)``, never above ``top``.

    ``r256`` is float32 with ``0 <= r <= top <= 255``; where rounding pushes ``r`` a hair above
    ``top`` (a ratio to a norm), the level stays ``top``. Callers scale by 256 in the pass that
    computes ``r`` (exact: a power of two). Reference: ``floor(r) + (torch.rand(n) < r -
    floor(r))`` (same distribution).

    How: ``T = floor(256 r)`` is ``r`` in fixed point with 8 fraction bits. Adding a uniform
    random byte ``u`` carries into the level bits exactly when ``(T mod 256) + u >= 256``, i.e.
    with probability ``(T mod 256) / 256``; only on a tie, where the sum's low byte is 255
    (1/256 of the values), does the rest of the fraction, ``256 r - T``, decide with a float32
    uniform. So P(up) = r - floor(r) exactly, at ~8 random bits per value instead of 32."""
    u = random_bytes(r256.numel(), generator, r256.device)
    levels, tie = _carry(r256.detach().reshape(-1), u, numpy=r256.is_cpu)
    if tie.numel():
        rt = r256.reshape(-1)[tie]
        frac = rt - rt.floor()  # the fraction below the 8th bit, in [0, 1)
        frac[levels[tie] >= top] = 0.0  # the top level never rounds up
        draw = frac > 0  # a zero fraction loses its tie without a random number
        won = torch.zeros_like(draw)
        won[draw] = torch.rand(int(draw.sum()), generator=generator,
                               device=r256.device) < frac[draw]
        levels[tie] += won.to(dtype=torch.uint8)
    return levels.view(r256.shape)


def _carry(r256: torch.Tensor, u: torch.Tensor, numpy: bool):
    """(floor(256 r) + u) >> 8 as uint8, and the flat indices where its low byte is 255."""
    if numpy:  # the CPU: numpy's casts and uint8/uint16 passes are ~2-5x torch's
        total = r256.numpy().astype(np.uint16)  # T <= 255 * 256, + u <= 65535: no overflow
        np.add(total, u.numpy(), out=total)
        return (torch.from_numpy((total >> 8).astype(np.uint8)),
                torch.from_numpy(np.flatnonzero(total.astype(np.uint8) == 255)))
    total = r256.to(dtype=torch.int32).add_(u)
    return (total >> 8).to(dtype=torch.uint8), ((total & 255) == 255).nonzero().reshape(-1)


def truncate(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x.to(dtype)`` for float ``x`` >= 0 in the range of the integer ``dtype`` (uint8 or
    int32): the floor. On the CPU numpy casts, ~5x faster than torch's single-thread cast."""
    if x.is_cpu and x.dtype == torch.float32:
        np_dtype = {torch.uint8: np.uint8, torch.int32: np.int32}[dtype]
        return torch.from_numpy(x.detach().contiguous().numpy().astype(np_dtype))
    return x.to(dtype=dtype)


@takes(seed=SEED)
class Compressor:
    """Base class: subclasses implement :meth:`encode` and :meth:`decompress`.

    :meth:`compress` validates the input (floating point, finite), makes it contiguous and 1-D,
    and calls :meth:`encode`. ``key`` names the tensor for codecs that keep per-tensor state
    (residuals, warm starts). Randomness comes from ``self.generator`` (a CPU generator):
    private per rank unless ``shared_randomness`` is set, in which case all ranks draw the same
    numbers. Codecs draw through ``self.generator_for(tensor.device)``, which is that generator
    on the CPU and a generator seeded the same way on any other device.
    """

    name = "base"
    allreduce_compatible = False
    shared_randomness = False
    stateful = False
    fixed_size = False  # payload sizes depend only on the tensor's size: peers need no size exchange
    # True where encode refuses NaN/Inf itself: a reduction it computes anyway (a norm, a max)
    # is non-finite whenever an input is, and only then does it call check_finite (one pass
    # over the tensor saved per call)
    checks_finite = False
    #: the payload's declared wire format (``lab.compress.wire``); every codec sets one
    wire: WireFormat | None = None
    #: True where :meth:`wire_vars` reads the payload (a header): its names are then derived
    #: on every check, not kept per tensor size
    wire_vars_read_payload = False
    #: parts whose entry ranges :meth:`decode` checks itself, in the pass that reads them
    #: (the sparse codecs' scatter); :meth:`decompress` leaves those to it, and
    #: :meth:`check_payload` alone still checks everything
    decode_checks: tuple = ()
    #: True where :meth:`decode` checks what the format cannot declare (a stream's structure,
    #: codes against the points sent, keys a sketch decodes to): :meth:`check_payload` then
    #: decodes too, so it refuses all that :meth:`decompress` refuses
    checks_in_decode = False

    def __init__(self, seed: int = 0):
        self.seed = seed
        self.bind(rank=0, world_size=1)

    def __setattr__(self, name: str, value) -> None:
        # a public attribute (density, bucket_size...) may change the wire format: forget the
        # names the check derived from the old values
        object.__setattr__(self, name, value)
        if name[0] != "_":
            self.__dict__.pop("_wire_names", None)
            self.__dict__.pop("_wire_plans", None)
            self.__dict__.pop("_wire_last", None)

    def bind(self, rank: int, world_size: int) -> "Compressor":
        """Tell the codec which rank it runs on; reseeds its generator accordingly."""
        self.rank, self.world_size = rank, world_size
        offset = 0 if self.shared_randomness else 1_000_003 * rank
        self.generator = torch.Generator().manual_seed(self.seed + offset)
        self._device_generators = {}
        return self

    def generator_for(self, device) -> torch.Generator:
        """The codec's generator on ``device``: ``self.generator`` on the CPU; elsewhere one
        generator per device, seeded exactly like the CPU one (per rank, or shared when
        ``shared_randomness``), so random numbers are drawn where the tensor lives instead of
        being drawn on the CPU and copied over. Same seed on every rank that shares it, but a
        GPU stream (Philox) differs from the CPU's (Mersenne twister): same distribution,
        not the same bits."""
        return device_generator(self.generator, self.__dict__.setdefault("_device_generators", {}),
                                torch.device(device))

    def compress(self, tensor: torch.Tensor, key: Any = None) -> tuple[Payload, Any]:
        """``(payload, ctx)`` for ``tensor`` (any shape): the payload is what crosses the wire,
        ``ctx`` stays on this rank. ``key`` names the tensor for per-tensor state and
        generators. Flattens and calls ``encode``; a contiguous float32 CPU tensor goes to
        :meth:`~lab.compress.Compressor.encode_plain` first."""
        picked = self.encode_plain(tensor, key) if native_small.plain(tensor) else None
        if picked is not None:
            payload, inner = picked
            return payload, (tensor.shape, torch.float32, inner)
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{self.name}: tensor must be a torch.Tensor, got {type(tensor).__name__}")
        if not tensor.is_floating_point():
            raise TypeError(f"{self.name}: tensor must be floating point, got dtype {tensor.dtype}")
        if not self.checks_finite:
            check_finite(tensor, self.name)
        if tensor.dim() == 1 and not tensor.requires_grad and tensor.is_contiguous():
            flat = tensor  # already what the chain below gives (~3 us less on a small tensor)
        else:
            flat = tensor.detach().reshape(-1).contiguous()
        payload, ctx = self.encode(flat, key)
        return tuple(payload), (tensor.shape, tensor.dtype, ctx)

    def decompress(self, payload: Payload, ctx: Any) -> torch.Tensor:
        """The tensor (original shape and dtype) that ``payload`` and this rank's ``ctx``
        decode to; a payload that does not match ``wire`` raises
        :class:`~lab.compress.wire.PayloadError`."""
        shape, dtype, inner = ctx
        out = self.decode_plain(payload, shape.numel()) \
            if dtype is torch.float32 and inner is None else None
        if out is not None:
            return out if len(shape) == 1 else out.view(shape)
        if self.wire is None:
            raise NotImplementedError(f"{self.name}: the codec declares no wire format")
        numel = shape.numel()
        payload = self.wire.check(self, payload, numel, dtype, inner, self.decode_checks)
        out = self.decode(payload, inner, numel, dtype)
        return out if len(shape) == 1 and out.dim() == 1 else out.reshape(shape)

    def encode_plain(self, x: torch.Tensor, key: Any):
        """Speed (small tensors): ``encode``'s ``(payload, ctx)`` for ``x``, a contiguous
        float32 CPU tensor of any shape (``native_small.plain``), in one or two C calls and
        without ``compress``'s checks and flattening: the same bits as the general route. None,
        with nothing drawn or changed, where the codec has no such path or it does not apply
        (NaN/Inf included: the general route then raises). Default: None."""
        return None

    def decode_plain(self, payload: Payload, n: int) -> torch.Tensor | None:
        """Speed: the 1-D float32 tensor of ``n`` values that ``payload`` decodes to, where it
        has the declared format and the codec recognises and decodes it in one C call; None
        otherwise, and ``decompress``'s full check names what is wrong. Asked for float32
        tensors whose ctx holds nothing else. Default: None."""
        return None

    def decompress_into(self, payload: Payload, ctx: Any, out: torch.Tensor) -> torch.Tensor:
        """:meth:`decompress` written into ``out`` (the original tensor's shape); returns
        ``out``. Codecs that can decode in place (the casts) skip the intermediate tensor."""
        return out.copy_(self.decompress(payload, ctx).reshape(out.shape))

    def subtract_decompressed_(self, payload: Payload, ctx: Any, out: torch.Tensor) -> torch.Tensor:
        """``out -= decompress(payload, ctx)`` in place (error feedback's residual update);
        returns ``out``. Codecs that can decode straight into the subtraction skip the decoded
        tensor (the same values)."""
        return out.sub_(self.decompress(payload, ctx).reshape(out.shape))

    def feedback_step(self, tensor: torch.Tensor, residual: torch.Tensor | None):
        """Error feedback's step fused, where a codec has it (the scaled sign, in C):
        ``(payload, ctx, new residual)`` for ``p = tensor + residual`` (residual None, or of
        another shape than tensor: zero), the new residual being ``p - decompress(payload,
        ctx)`` (it may be written over the old one in place); the values of
        :class:`~lab.compress.ErrorFeedback`'s general route. None (the default) where it does
        not apply, with nothing changed (the residual included): error feedback then runs
        that route."""
        return None

    def check_payload(self, payload: Payload, ctx: Any) -> tuple:
        """``payload`` as a tuple, checked against :attr:`wire` for the tensor ``ctx``
        describes (and decoded, where ``checks_in_decode``); raises
        :class:`~lab.compress.wire.PayloadError` where :meth:`decompress` would."""
        shape, dtype, inner = ctx
        if self.wire is None:
            raise NotImplementedError(f"{self.name}: the codec declares no wire format")
        payload = self.wire.check(self, payload, shape.numel(), dtype, inner)
        if self.checks_in_decode:
            self.decode(payload, inner, shape.numel(), dtype)
        return payload

    def wire_vars(self, numel: int, ctx: Any, payload: tuple) -> dict:
        """The names :attr:`wire`'s expressions use beyond ``n`` and the codec's attributes
        (``k``, ``buckets``...), as a new dict, for a tensor of ``numel`` values; ``ctx`` is
        the codec's own part of the ctx (a tensor ctx is not read: the names are kept per
        tensor size and hashable ctx). Subclasses extend it; one that reads ``payload`` sets
        ``wire_vars_read_payload``."""
        return {}

    # -- to implement ---------------------------------------------------------------------
    def encode(self, flat: torch.Tensor, key: Any) -> tuple[Payload, Any]:
        """Compress the 1-D tensor ``flat``: what each codec implements; returns
        ``(payload, ctx)``."""
        raise NotImplementedError

    def decode(self, payload: Payload, ctx: Any, numel: int, dtype: torch.dtype) -> torch.Tensor:
        """Return a 1-D tensor of ``numel`` elements in ``dtype``."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def make(name: str, **kwargs) -> Compressor:
    """Build a registered codec by name (``make("fp16")``, ``make("topk", density=0.01)``)."""
    return REGISTRY.make(name, **kwargs)


def names() -> list[str]:
    """The registered codec names, sorted (``lab.compress.make(name)`` builds one)."""
    return REGISTRY.names()


def table(codecs) -> list[dict]:
    """Rows ``codec, part, dtype, length, entries`` for the codecs given (names or objects):
    the book's wire-format tables, generated from the declarations (``lab.compress.wire``)."""
    rows = []
    for c in codecs:
        c = make(c) if isinstance(c, str) else c
        fmt = c.wire
        where = "; ".join([f"{k} = {v}" for k, v in fmt.where.items()]
                          + [f"{k} in {v}" for k, v in fmt.counts.items()
                             if any(p.size != k and p.size.endswith(k) for p in fmt.parts)])
        for i, r in enumerate(fmt.rows()):
            rows.append({"codec": c.name if i == 0 else "", **r,
                         "where": where if i == 0 else ""})
    return rows
