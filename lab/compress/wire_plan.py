"""The fast path of a wire-format check (:mod:`lab.compress.wire`): a plan kept per (tensor
size, dtype, ctx) on the codec, with every length and bound evaluated once, so that a check is
a few comparisons and one C min/max per bounded part. A plan accepts exactly what the full
check accepts; whatever it refuses goes to the full check, which names the mismatch."""
from __future__ import annotations

import math

import torch

from . import native
from .packing import index_dtype
from .wire_expr import _ev


def plan_for(fmt, codec, numel: int, dtype, ctx, skip=()):
    """(dtypes, sizes, bounds) for a tensor of ``numel`` values of ``dtype``: sizes an int
    (exact), ``(0, lo, hi)`` (a range), ``(1, factor, lo, hi)`` (the first part of a count:
    binds it) or ``(2, factor, slot)`` (``factor`` times the count bound ``slot``-th);
    bounds ``(i, lo, hi, kernel)`` for integer parts, ``(i, None, nonneg, kernel)`` for
    finite ones (``kernel``: the C range of an int32 or float32 part, or None). Kept on
    the codec beside the derived names; None where it cannot be kept (a ``wire_vars``
    that reads the payload, an unhashable ctx)."""
    if codec.wire_vars_read_payload:
        return None
    plans = codec.__dict__.get("_wire_plans")
    # a tensor ctx is never read (:meth:`Compressor.wire_vars`): keyed as None
    key = (numel, dtype, None if isinstance(ctx, torch.Tensor) else ctx, skip)
    try:
        plan = plans.get(key) if plans is not None else None
    except TypeError:  # an unhashable ctx
        return None
    if plan is not None:
        return plan or None
    try:
        plan = make_plan(fmt, codec, numel, dtype, ctx, skip)
    except Exception:  # noqa: BLE001 - an expression that fails here fails in the full
        plan = False   # check too, which raises it in order: keep no plan for this key
    plans = codec.__dict__.setdefault("_wire_plans", {})
    if len(plans) >= 64:  # sizes of one model's tensors: a bounded set
        plans.clear()
    plans[key] = plan
    return plan or None

def make_plan(fmt, codec, numel: int, dtype, ctx, skip) -> tuple:
    """The plan :func:`plan_for` keeps: every dtype, length and entry bound of ``fmt``
    evaluated for ``numel`` values of ``dtype`` decoded with ``ctx``."""
    names = fmt._names_for(codec, numel, ctx, ())
    index = index_dtype(numel)
    dtypes = tuple(dtype if k == 1 else index if k == 2 else fixed
                   for _, k, fixed in fmt._dtypes)
    sizes, slots = [], {}
    for c in fmt._compiled:
        if c.kind == "exact":
            sizes.append(_ev(c.size, names))
        elif c.kind == "range":
            sizes.append((0, *(_ev(e, names) for e in c.size)))
        elif c.size[1] in slots:  # a count an earlier part binds: its length follows
            sizes.append((2, _ev(c.size[0], names), slots[c.size[1]]))
        else:
            lo, hi = (_ev(e, names) for e in fmt._count_ranges[c.size[1]])
            slots[c.size[1]] = len(slots)
            sizes.append((1, _ev(c.size[0], names), lo, hi))
    bounds = []
    lib = native.library() if native.enabled(torch.empty(0)) else None
    for i in fmt._valued:
        if fmt.parts[i].name in skip:
            continue
        v = fmt._compiled[i].values
        # an int32 or float32 part's range: the C kernel called straight (no wrapper)
        fast = None if lib is None else {torch.int32: lib.lab_int32_range,
                                         torch.float32: lib.lab_float32_range}.get(dtypes[i])
        bounds.append((i, None, v[1], fast) if v[0] == "finite" else
                      (i, _ev(v[1], names), _ev(v[2], names), fast))
    return dtypes, tuple(sizes), tuple(bounds)


def run_plan(plan, payload) -> bool:
    """Whether ``payload`` (a tuple) passes ``plan``: the same conditions as the full check."""
    dtypes, sizes, bounds = plan
    if len(payload) != len(dtypes):
        return False
    counts = []  # the counts bound so far, in order of their first part
    for t, want, size in zip(payload, dtypes, sizes):
        if t.__class__ is not torch.Tensor or t.dtype is not want:
            return False
        m = t.numel()
        if size.__class__ is int:
            if m != size:
                return False
        elif size[0] == 0:  # a range
            if not size[1] <= m <= size[2]:
                return False
        elif size[0] == 2:  # factor * a bound count
            if m != size[1] * counts[size[2]]:
                return False
        else:  # binds a count: factor * count with the count in its range
            factor = size[1]
            if factor == 1:
                value, rest = m, 0
            elif factor:
                value, rest = divmod(m, factor)
            else:  # a count of zero-length things (an empty tensor's atoms): as the full check
                value, rest = 0, m
            if rest or not size[2] <= value <= size[3]:
                return False
            counts.append(value)
    for i, lo, hi, fast in bounds:
        t = payload[i]
        m = t.numel()
        if not m:
            continue
        if m == 1:  # a header field (a scale): one read
            got_lo = got_hi = t.item()
        elif fast is not None and t.is_cpu and t.is_contiguous():
            unpack = native.unpack_float_range if lo is None else native.unpack_range
            got_lo, got_hi = unpack(fast(t.data_ptr(), m))
        else:
            got_lo, got_hi = min_max(t)
        if lo is None:  # finite (hi: and >= 0)
            if not (math.isfinite(got_lo) and math.isfinite(got_hi)) or (hi and got_lo < 0):
                return False
        elif got_lo < lo or got_hi > hi:
            return False
    return True


def min_max(t: torch.Tensor):
    """(min, max) of a tensor's entries as Python numbers (NaN if any entry is NaN): in
    Python for a few entries (a header), else one ``torch.aminmax`` (~3 us on 10^4 entries)."""
    if t.dtype is torch.int32 and t.numel() > 32 and t.is_cpu \
            and t.is_contiguous() and native.enabled(t):
        return native.int32_range(t)  # one vectorized pass, one ctypes call
    if t.numel() <= 32:
        values = t.tolist() if t.dim() == 1 else t.reshape(-1).tolist()
        if any(v != v for v in values):  # NaN: min/max of Python floats would skip it
            return math.nan, math.nan
        return min(values), max(values)
    lo, hi = torch.aminmax(t)  # payloads carry no autograd history
    return lo.item(), hi.item()
