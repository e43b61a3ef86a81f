"""Wrappers of the small-tensor kernels (``kernels_small.c``, ``kernels_select.c``; issue 31 item 4).

On a tensor of ~1000 values a codec's arithmetic is nothing; a call costs its Python, its torch
ops (~2-4 us each on one core among other ops: dispatch, a TensorIterator, an allocation) and
its ctypes calls (~1-2 us). These kernels let a codec's fast path do a whole encode or decode
in one or two C calls beside the payload's allocations. Each gives the bits of the codec's general route,
which stays the readable reference, runs where these do not (``LAB_NATIVE=0``,
:func:`lab.compress.native.reference`, another device or dtype) and is what
``tests/test_codec_overhead.py`` compares them with.

Two kernels reproduce torch itself: Top-k's order (``torch.topk`` on ``|x|``, where torch runs
``std::partial_sort`` and the order is unique) and Random-k's indices (drawn from the state of
the codec's generator as ``torch.randint``, ``torch.unique`` and ``torch.randperm`` draw them).
:func:`topk_exact` and :func:`rng_exact` compare each with torch once per process; where they
differ (another torch), the codecs keep torch's route.
"""
from __future__ import annotations

import contextlib
import ctypes
import math
import threading

import torch

from . import native

_exact: dict = {}
_local = threading.local()
_off = False  # inside general()

# Empty CPU tensors of each dtype the payloads use: ``BYTES.new_empty(n)`` is torch.empty(n,
# dtype=torch.uint8) without parsing a dtype argument (~0.6 us less an allocation)
BYTES, INTS, LONGS, FLOATS = (torch.empty(0, dtype=d) for d in (
    torch.uint8, torch.int32, torch.int64, torch.float32))


class _Kernels:
    """The library's kernels as attributes (``K.lab_sign_bits``), each looked up in the CDLL
    once and then kept here: an instance attribute read, ~30 ns, where a CDLL attribute read
    costs ~0.3 us and a call through a dict helper ~0.15 us (the small paths call several)."""

    def __getattr__(self, name: str):
        f = getattr(native.library(), name)
        setattr(self, name, f)
        return f


K = _Kernels()
_TENSOR, _FLOAT32 = torch.Tensor, torch.float32


def plain(t) -> bool:
    """Whether ``t`` is a contiguous float32 CPU tensor (not a subclass) that the kernels take,
    outside :func:`general`: the codecs' small-tensor paths run for it."""
    return (t.__class__ is _TENSOR and t.dtype is _FLOAT32 and not _off and t.is_contiguous()
            and enabled(t))


def enabled(t: torch.Tensor) -> bool:
    """:func:`native.enabled` (read inline: it is asked on every call) outside
    :func:`general`: a decoder's small-tensor path runs."""
    state = native._state
    return (not _off and t.is_cpu and t.numel() < 2 ** 31 and not state.get("off")
            and (state.get("on") or native.enabled(t)))


@contextlib.contextmanager
def general():
    """Run the codecs' general routes inside the block (their other C kernels stay on): what
    the tests compare the small-tensor paths with."""
    global _off
    before, _off = _off, True
    try:
        yield
    finally:
        _off = before


def parts(payload, *spec) -> tuple | None:
    """``payload``'s tensors where it is a tuple of ``len(spec)`` contiguous CPU tensors that
    the kernels take, part ``i`` of dtype ``spec[i][0]`` and, unless ``spec[i][1]`` is None,
    with ``spec[i][1]`` values: the declared format a decoder's small-tensor path recognises
    inline; else None (the full check then names what is wrong)."""
    if payload.__class__ is not tuple or len(payload) != len(spec):
        return None
    for t, (dtype, numel) in zip(payload, spec):
        if t.__class__ is not _TENSOR or t.dtype is not dtype or \
                (numel is not None and t.numel() != numel) or not t.is_contiguous() or \
                not enabled(t):
            return None
    return payload


def same(t, x: torch.Tensor) -> bool:
    """Whether ``t`` (a codec's own state buffer) is, like plain ``x``, a contiguous float32
    CPU tensor of as many values: :func:`plain` without the checks ``x`` passed already."""
    return (t.__class__ is _TENSOR and t.dtype is _FLOAT32 and t.is_cpu and t.is_contiguous()
            and t.numel() == x.numel())


def f32(value: float) -> float:
    """``value`` rounded to float32 (to nearest), as a Python float."""
    return ctypes.c_float(value).value


def sqrt32(value: float) -> float:
    """torch's float32 square root of ``value`` (a float32 value), as a Python float, through
    a 0-d tensor of this thread: on the CPU torch takes MKL's, which is not always correctly
    rounded, so ``f32(math.sqrt(value))`` may differ from it in the last bit."""
    buf = getattr(_local, "sqrt", None)
    if buf is None:
        buf = _local.sqrt = torch.empty((), dtype=torch.float32)
    return buf.fill_(value).sqrt_().item()


def sqrt64_to_32(value: float) -> float:
    """``f32(torch's float64 square root of value)``: torch's root (MKL's on the CPU) is
    within one unit in the last place, so it is ``r = math.sqrt(value)`` or a neighbour of r;
    where all three round to the same float32, that is the answer without a torch op (all but
    about one value in 2^28), else torch's root is taken."""
    r = math.sqrt(value)
    low, mid, high = f32(math.nextafter(r, 0.0)), f32(r), f32(math.nextafter(r, math.inf))
    if low == mid == high:
        return mid
    buf = getattr(_local, "sqrt64", None)
    if buf is None:
        buf = _local.sqrt64 = torch.empty((), dtype=torch.float64)
    return f32(buf.fill_(value).sqrt_().item())


def scratch(rows: int, cols: int) -> torch.Tensor:
    """A (rows, cols) float32 tensor of this thread, the same one for the same shape (up to
    16384 values and 64 shapes; beyond, a new one): a temporary that a C pass fills and a
    torch reduction reads, without an allocation a call."""
    if rows * cols > 16384:
        return torch.empty(rows, cols, dtype=torch.float32)
    bufs = getattr(_local, "scratch", None)
    if bufs is None:
        bufs = _local.scratch = {}
    buf = bufs.get((rows, cols))
    if buf is None:
        if len(bufs) >= 64:
            bufs.clear()
        buf = bufs[(rows, cols)] = torch.empty(rows, cols, dtype=torch.float32)
    return buf


def key(generator: torch.Generator) -> int:
    """The address of two int64 words drawn as ``torch.randint(0, 2 ** 32, (2,),
    generator=generator)`` draws them (randint is ``empty(...).random_(0, 2 ** 32)``), in a
    buffer of this thread: the stochastic kernels' hash key (``native._key``) without the
    tensor and the two reads."""
    buf = getattr(_local, "key", None)
    if buf is None:
        buf = _local.key = torch.empty(2, dtype=torch.int64)
    buf.random_(0, 2 ** 32, generator=generator)
    return buf.data_ptr()


def expand_pair(bits: torch.Tensor, n: int, zero: float, one: float) -> torch.Tensor:
    """float32 ``one`` where a bit of packed ``bits`` is set, else ``zero`` (each rounded to
    float32), for ``n`` values: :func:`native.expand_pair` without the float array."""
    out = FLOATS.new_empty(n)
    K.lab_expand_pair(bits.data_ptr(), n, zero, one, out.data_ptr())
    return out


def scatter(values: torch.Tensor, idx: torch.Tensor, n: int) -> torch.Tensor | None:
    """float32 zeros of ``n`` with ``values[i]`` at ``idx[i]`` (contiguous float32 values, int32
    or int64 indices of the same length), each index checked; None if one is outside
    ``[0, n)`` (the caller names it)."""
    k = idx.numel()
    if not (values.dtype is torch.float32 and idx.dtype in (torch.int32, torch.int64)
            and values.numel() == k and values.is_contiguous() and idx.is_contiguous()):
        raise ValueError(f"scatter: need contiguous float32 values and int32 or int64 indices "
                         f"of one length, got {values.numel()} {values.dtype} and {k} "
                         f"{idx.dtype}")
    out = FLOATS.new_empty(n)
    if K.lab_scatter_into(values.data_ptr(), idx.data_ptr(), idx.dtype is torch.int64, k, n,
                          out.data_ptr()):
        return None
    return out


def topk(x: torch.Tensor, k: int, clear0=None, clear1=None):
    """``(x[idx], int32 idx)`` for the ``k`` largest ``|x|`` in ``torch.topk(x.abs(), k,
    sorted=False)``'s order, for plain 1-D ``x`` with ``64 k <= n`` (torch's partial sort);
    then zeros at ``idx`` in ``clear0`` and ``clear1`` (float32, like x; DGC's v and u). None,
    with nothing written, on NaN or Inf in x or a tie among the k + 1 largest (torch's order
    is then its heap's): the caller runs torch.topk."""
    vals = FLOATS.new_empty(k)
    idx = INTS.new_empty(k)
    if K.lab_topk_abs(x.data_ptr(), x.numel(), k, vals.data_ptr(), idx.data_ptr(),
                      None if clear0 is None else clear0.data_ptr(),
                      None if clear1 is None else clear1.data_ptr()):
        return None
    return vals, idx


def random_indices(generator: torch.Generator, n: int, k: int, x: torch.Tensor | None = None,
                   with_int32: bool = False):
    """``distinct_indices(n, k, generator)`` of :mod:`lab.compress.randomk` (``0 < k <= n <
    2 ** 31``), drawn in C from the generator's state, which is set back advanced exactly as
    torch's draws advance it; with plain ``x``, also ``x[idx]`` (and int32 indices). Returns
    ``(int64 idx, values or None, int32 idx or None)``; None, the generator untouched, where
    x holds NaN or Inf (the codec refuses it before drawing) or the kernel could not allocate
    (the caller takes torch's route)."""
    state = generator.get_state()
    idx = LONGS.new_empty(k)
    vals = None if x is None else FLOATS.new_empty(k)
    idx32 = INTS.new_empty(k) if with_int32 else None
    if K.lab_random_indices(state.data_ptr(), n, k, idx.data_ptr(),
                            None if x is None else x.data_ptr(),
                            None if vals is None else vals.data_ptr(),
                            None if idx32 is None else idx32.data_ptr()):
        return None
    generator.set_state(state)
    return idx, vals, idx32


def topk_exact() -> bool:
    """Whether :func:`topk` gives ``torch.topk``'s indices in its order on this torch: checked
    once, on inputs of distinct magnitudes and with ties (which it must hand to torch)."""
    if "topk" not in _exact:
        _exact["topk"] = _check_topk()
    return _exact["topk"]


def _check_topk() -> bool:
    g = torch.Generator().manual_seed(31)
    for n, k in ((64, 1), (1000, 10), (1000, 15), (4099, 64), (70000, 1000)):
        x = torch.randn(n, generator=g)
        want = torch.topk(x.abs(), k, sorted=False).indices
        got = topk(x, k)
        if got is None or not torch.equal(got[1].long(), want) \
                or not torch.equal(got[0], x[want]):
            return False
    tied = torch.ones(640)
    return topk(tied, 10) is None  # ties go to torch


def rng_exact(distinct_indices) -> bool:
    """Whether :func:`random_indices` draws what ``distinct_indices`` (Random-k's torch
    reference, :func:`lab.compress.randomk.distinct_indices`, passed in: the codecs sit above
    these wrappers) draws with torch on this torch, and leaves the generator in the same
    state: checked once, on both of its routes (a permutation; rounds of draws) and across
    the generator's refills."""
    if "rng" not in _exact:
        _exact["rng"] = _check_rng(distinct_indices)
    return _exact["rng"]


def _check_rng(distinct_indices) -> bool:
    for seed, n, k in ((1, 1000, 10), (2, 1000, 200), (3, 64, 7), (4, 100, 13), (5, 7, 7),
                       (6, 50000, 3000), (7, 3000, 1000)):
        want_gen = torch.Generator().manual_seed(seed)
        got_gen = torch.Generator().manual_seed(seed)
        for _ in range(3):  # successive calls: the state carries over
            want = distinct_indices(n, k, want_gen)
            got = random_indices(got_gen, n, k)
            if got is None or not torch.equal(got[0], want):
                return False
        if not torch.equal(got_gen.get_state(), want_gen.get_state()):
            return False
    return True
