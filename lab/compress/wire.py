"""Declared wire formats: what a codec's payload may hold, checked before decoding it.

Each codec declares its payload as a :class:`WireFormat`, a list of :class:`Part` s next to its
``compress``: the part's name, its dtype, its length (number of elements) as an expression of
the tensor's size ``n`` and the codec's parameters, and, where an entry addresses memory or
scales the output, the range of its entries. ``decompress`` checks a payload against the
declaration before touching memory and raises :class:`PayloadError` (a ``ValueError``) naming
the codec, the part, what was expected and what came. The book's codec tables are generated
from the same declarations (:func:`lab.compress.base.table`, exported as
``lab.compress.wire_table``).

Expressions are Python, evaluated with ``n`` (the tensor's number of values), the codec's
attributes (``density``, ``bits``...), the names its ``wire_vars`` derives (``k``,
``buckets``...) and the *lengths* of the parts checked before (``ceil(c / 8)``), plus ``ceil``,
``floor``, ``log2``, ``min`` and ``max``. A length is exact (``"ceil(n / 8)"``), a range
``"lo..hi"`` (both ends included), or one of the format's ``counts``: an unknown declared with
its range (``counts={"c": "0..n"}``) that the first part of length ``"c"`` (or
``"expr * c"``) fixes, and which later parts must then match. ``values`` bounds the entries:
``"lo..hi"`` for integers (both ends included; checked with one min and one max, never a
per-element Python loop), ``"finite"`` or ``"finite >= 0"`` for floats (header fields only:
norms, scales; a bulk value part is never scanned).

A check runs from a plan kept per (tensor size, dtype, ctx) on the codec: every length and
bound evaluated once, so it costs a few comparisons and one C min/max per bounded part (about
2 us; ``python -m lab bench codecs --checks``). A decoder that reads an index part in C anyway
(the sparse codecs' scatter) tests each index there, before its write, and declares it in
``decode_checks``: ``decompress`` then leaves that range to it, ``check_payload`` still does all.

What is not checked: the content of value and code streams (a flipped bit in a float or a
2-bit code decodes to another finite value, detectable only by a checksum), except where a
codec's decoder adds a check because an entry addresses memory (ZipML's codes, the keys
SketchML's stream decodes to) or a stream has structure (QSGD-Elias): such a codec sets
``checks_in_decode``, and its ``check_payload`` decodes too, so it refuses all that
``decompress`` refuses.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .packing import index_dtype
from .wire_expr import _GLOBALS, _PRODUCT, _compile, _ev, _range, _refs
from .wire_plan import min_max, plan_for, run_plan


class PayloadError(ValueError):
    """A payload that does not match its codec's declared wire format.

    ``codec``, ``part`` (a part's name, or ``"payload"`` for the tuple itself), ``expected``
    and ``got`` are kept as attributes; the message names all four."""

    def __init__(self, codec: str, part: str, expected, got):
        self.codec, self.part, self.expected, self.got = codec, part, expected, got
        super().__init__(f"{codec}: payload part {part!r}: expected {expected}, got {got}")


@dataclass(frozen=True)
class Part:
    """One tensor of a payload.

    ``dtype``: a ``torch.dtype``, ``"input"`` (the dtype of the tensor that was compressed) or
    ``"index"`` (``lab.compress.packing.index_dtype`` of ``n``: int32 below 2**31
    values). ``size``: its number of elements (see the module docstring). ``values``: the
    range of its entries, or None (unchecked)."""
    name: str
    dtype: object
    size: str
    values: str | None = None


@dataclass
class _Compiled:
    part: Part
    size: object = None      # a code object (exact), a (lo, hi) pair, or a (factor, count) pair
    kind: str = "exact"      # exact | range | count
    values: object = None    # ("int", lo, hi) | ("finite", nonneg) | None


@dataclass
class WireFormat:
    """A codec's payload: its parts in order, unknown counts with their ranges, and a
    description of the names ``wire_vars`` derives (for the tables)."""
    parts: tuple
    counts: dict = field(default_factory=dict)
    where: dict = field(default_factory=dict)
    note: str = ""

    def __init__(self, *parts: Part, counts=None, where=None, note: str = ""):
        self.parts, self.counts = tuple(parts), dict(counts or {})
        self.where, self.note = dict(where or {}), note
        self._count_ranges = {name: _range(r) for name, r in self.counts.items()}
        self._compiled = [self._compile_part(p) for p in self.parts]
        self._names = ", ".join(p.name for p in self.parts)
        # (name, 0: fixed dtype | 1: the input's | 2: the index dtype, the fixed dtype)
        self._dtypes = [(p.name, 1 if p.dtype == "input" else 2 if p.dtype == "index" else 0,
                         p.dtype) for p in self.parts]
        self._valued = [i for i, p in enumerate(self.parts) if p.values is not None]
        # the codec attributes the expressions read (fetched into a plain dict per check)
        codes = [c.size for c in self._compiled if c.kind == "exact"]
        codes += [c.size[0] for c in self._compiled if c.kind == "count"]
        codes += [e for c in self._compiled if c.kind == "range" for e in c.size]
        codes += [e for c in self._compiled if c.values and c.values[0] == "int"
                  for e in c.values[1:]]
        codes += [e for r in self._count_ranges.values() for e in r]
        known = set(_GLOBALS) | {"n"} | set(self.counts) | {p.name for p in self.parts}
        self._attrs = sorted(set().union(*map(_refs, codes)) - known)
        # a plan (``wire_plan``) needs every length and bound known before the payload is
        # read: no expression may read a part's length or a count (bar a count's own part)
        late = set(self.counts) | {p.name for p in self.parts}
        self._plannable = all(
            not (_refs(c.size) & late) if c.kind == "exact" else
            not (set().union(*map(_refs, c.size)) & late) if c.kind == "range" else
            not (_refs(c.size[0]) & late) for c in self._compiled) and not any(
            set().union(*map(_refs, r)) & late for r in self._count_ranges.values()) and all(
            not (set().union(*map(_refs, c.values[1:])) & late)
            for c in self._compiled if c.values and c.values[0] == "int")
        # lengths that depend on n alone (the casts, the signs): no names to derive
        self._simple = not self.counts and not self._valued and all(
            c.kind == "exact" and _refs(c.size) <= set(_GLOBALS) | {"n"}
            for c in self._compiled)

    def _compile_part(self, p: Part) -> _Compiled:
        c = _Compiled(p)
        m = _PRODUCT.match(p.size.strip())
        if m and m.group(2) in self.counts:
            c.kind, c.size = "count", (_compile(m.group(1) or "1"), m.group(2))
        elif ".." in p.size:
            c.kind, c.size = "range", _range(p.size)
        else:
            c.size = _compile(p.size)
        if p.values is not None:
            v = p.values.replace(" ", "")
            if v in ("finite", "finite>=0"):
                c.values = ("finite", v.endswith(">=0"))
            else:
                c.values = ("int", *_range(p.values))
        return c

    # -- the check ----------------------------------------------------------------------------
    def check(self, codec, payload, numel: int, dtype: torch.dtype, ctx,
              skip: tuple = ()) -> tuple:
        """``payload`` as a tuple if it matches this format for a tensor of ``numel`` values
        of ``dtype`` decoded with ``ctx``; else raise :class:`PayloadError`.

        The common case runs a plan kept per (n, dtype, ctx) (``wire_plan.plan_for``): every
        dtype, length and entry bound already evaluated, so a check is a few comparisons and one
        min/max per bounded part. Any mismatch there falls to the full check below, which
        names it; the plan accepts exactly what the full check accepts.

        ``skip``: names of parts whose entry ranges the caller checks itself, in the pass that
        reads them (a decoder that fuses the test into its scatter,
        ``Compressor.decode_checks``); their lengths and dtypes are
        still checked here."""
        if payload.__class__ is tuple and self._plannable:
            # the last plan, matched by identity (one tensor after another of one size)
            last = codec.__dict__.get("_wire_last")
            if last is not None and last[0] == numel and last[1] is dtype and last[2] is ctx \
                    and last[3] is skip:
                plan = last[4]
            else:
                plan = plan_for(self, codec, numel, dtype, ctx, skip)
                codec.__dict__["_wire_last"] = (numel, dtype, ctx, skip, plan)
            if plan is not None and run_plan(plan, payload):
                return payload
        return self._check(codec, payload, numel, dtype, ctx, skip)

    def _check(self, codec, payload, numel: int, dtype: torch.dtype, ctx, skip=()) -> tuple:
        """The full check: every condition in order, the first that fails raised, named."""
        name = codec.name
        if not isinstance(payload, (tuple, list)):
            raise PayloadError(name, "payload", f"a tuple of {len(self.parts)} tensors "
                               f"({self._names})", type(payload).__name__)
        if len(payload) != len(self.parts):
            raise PayloadError(name, "payload", f"{len(self.parts)} parts ({self._names})",
                               f"{len(payload)} parts")
        index = None
        for (pname, kind, fixed), t in zip(self._dtypes, payload):
            if t.__class__ is not torch.Tensor and not isinstance(t, torch.Tensor):
                raise PayloadError(name, pname, "a torch.Tensor", type(t).__name__)
            if kind == 0:
                want = fixed
            elif kind == 1:
                want = dtype
            else:
                want = index = index or index_dtype(numel)
            if t.dtype is not want:
                raise PayloadError(name, pname, f"dtype {want}", f"dtype {t.dtype}")
        names = {"n": numel} if self._simple else self._names_for(codec, numel, ctx, payload)
        bound = {}  # count -> (the part that fixed it, that part's length)
        for c, t in zip(self._compiled, payload):
            size = t.numel()
            if c.kind == "exact":
                want = _ev(c.size, names)
                if size != want:
                    raise PayloadError(name, c.part.name, f"{c.part.size} = {want} elements",
                                       f"{size}")
            elif c.kind == "range":
                lo, hi = _ev(c.size[0], names), _ev(c.size[1], names)
                if not lo <= size <= hi:
                    raise PayloadError(name, c.part.name, f"{c.part.size} = {lo}..{hi} "
                                       "elements", f"{size}")
            else:
                self._bind(codec, c, size, names, bound)
            names[c.part.name] = size
        for i in self._valued:
            if payload[i].numel() and self.parts[i].name not in skip:
                self._check_values(name, self._compiled[i], payload[i], names)
        return payload if payload.__class__ is tuple else tuple(payload)

    def _names_for(self, codec, numel: int, ctx, payload) -> dict:
        """``n``, the codec's derived names and the attributes the expressions read. Kept per
        (n, ctx) on the codec (``wire_vars`` and the attribute reads are most of a check's
        cost on a small payload) unless its ``wire_vars`` reads the payload; setting a public
        attribute of the codec drops them (:meth:`Compressor.__setattr__`)."""
        cache = None if codec.wire_vars_read_payload else codec.__dict__.get("_wire_names")
        key = (numel, None if isinstance(ctx, torch.Tensor) else ctx)
        if cache is not None:
            try:
                names = cache.get(key)
            except TypeError:  # an unhashable ctx: derive every time
                cache, names = None, None
            if names is not None:
                return names.copy()
        names = codec.wire_vars(numel, ctx, payload)
        names["n"] = numel
        for attr in self._attrs:
            if attr not in names:
                names[attr] = getattr(codec, attr)
        if not codec.wire_vars_read_payload:
            cache = codec.__dict__.setdefault("_wire_names", {})
            try:
                if len(cache) >= 64:  # sizes of one model's tensors: a bounded set
                    cache.clear()
                cache[key] = names.copy()
            except TypeError:
                pass
        return names

    def _bind(self, codec, c: _Compiled, size: int, names, bound: dict) -> None:
        """Fix the count ``c``'s length gives, or check it against the count an earlier part
        fixed; a disagreement names both parts (either may be the one cut or extended)."""
        factor_code, count = c.size
        factor = _ev(factor_code, names)
        if count in names:  # fixed by an earlier part
            if size != factor * names[count]:
                first, first_size = bound[count]
                raise PayloadError(codec.name, c.part.name, f"{c.part.size} = "
                                   f"{factor * names[count]} elements, as part {first!r} "
                                   f"({first_size} elements) gives {count} = {names[count]}",
                                   f"{size}")
            return
        value, rest = divmod(size, factor) if factor else (0, size)
        lo, hi = (_ev(e, names) for e in self._count_ranges[count])
        if rest or not lo <= value <= hi:
            raise PayloadError(codec.name, c.part.name, f"{c.part.size} elements with {count} "
                               f"in {self.counts[count]} = {lo}..{hi}", f"{size}")
        names[count] = value
        bound[count] = (c.part.name, size)

    def _check_values(self, codec: str, c: _Compiled, t: torch.Tensor, names) -> None:
        lo, hi = min_max(t)
        if c.values[0] == "finite":
            if not (math.isfinite(lo) and math.isfinite(hi)) or (c.values[1] and lo < 0):
                raise PayloadError(codec, c.part.name, f"entries {c.part.values}",
                                   f"entries in [{lo}, {hi}]")
            return
        want_lo, want_hi = _ev(c.values[1], names), _ev(c.values[2], names)
        if lo < want_lo or hi > want_hi:
            raise PayloadError(codec, c.part.name, f"entries in {c.part.values} = "
                               f"{want_lo}..{want_hi}", f"entries in {lo}..{hi}")

    # -- the tables ---------------------------------------------------------------------------
    def rows(self) -> list[dict]:
        """One dict per part: name, dtype, length, entries (for a table)."""
        def dt(d):
            return {"input": "as input", "index": "int32 (int64 if n >= 2^31)"}.get(d) or \
                str(d).replace("torch.", "")
        out = []
        for p in self.parts:
            size = p.size
            if p.size in self.counts:
                size = f"{p.size} in {self.counts[p.size]}"
            out.append({"part": p.name, "dtype": dt(p.dtype), "length": size,
                        "entries": p.values or ""})
        return out


def range_error(codec: str, part: Part, numel: int, t: torch.Tensor) -> PayloadError:
    """The :class:`PayloadError` of a part whose entries left ``0..n - 1`` (the declared range
    of an index part), for a decoder that found it in its own pass."""
    lo, hi = min_max(t)
    return PayloadError(codec, part.name, f"entries in {part.values} = 0..{numel - 1}",
                        f"entries in {lo}..{hi}")
