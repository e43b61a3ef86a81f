"""The small expression language of wire formats (:mod:`lab.compress.wire`): lengths and
entry bounds written as Python over ``n``, the codec's attributes and derived names, compiled
once; a constant or a single name costs a lookup, not an ``eval`` (a check runs on every
decode)."""
from __future__ import annotations

import math
import re

_GLOBALS = {"__builtins__": {}, "ceil": math.ceil, "floor": math.floor, "min": min, "max": max,
            "log2": math.log2}
_PRODUCT = re.compile(r"^(?:(.+?)\s*\*\s*)?([A-Za-z_]\w*)$")


class _Name(str):
    """An expression that is one name (``n``, ``k``): looked up, not evaluated."""


def _compile(expr: str):
    """An int for a constant, a :class:`_Name` for a name, else a code object: the first two
    cost a lookup, not an ``eval`` (the check runs on every decode)."""
    expr = expr.strip()
    if expr.isdigit():
        return int(expr)
    if expr.isidentifier():
        return _Name(expr)
    return compile(expr, f"<wire {expr}>", "eval")


def _ev(e, names):
    if e.__class__ is int:
        return e
    if e.__class__ is _Name:
        return names[e]
    return eval(e, _GLOBALS, names)


def _refs(e) -> set:
    """The names an expression reads."""
    if e.__class__ is _Name:
        return {str(e)}
    return set(e.co_names) if hasattr(e, "co_names") else set()


def _range(text: str):
    lo, _, hi = text.partition("..")
    return _compile(lo), _compile(hi)
