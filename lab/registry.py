"""A tiny name -> factory registry, so configs and the CLI can name things by string."""
from __future__ import annotations

import difflib
import inspect
from typing import Any, Callable

from .argspec import check_kwargs, declared


class Registry:
    """Maps names to factories: ``@REG.register("name")`` then ``REG.make("name", **kw)``."""

    def __init__(self, kind: str):
        self.kind = kind
        self._factories: dict[str, Callable[..., Any]] = {}

    def register(self, name: str) -> Callable:
        """Decorator: ``@register("name")`` files a factory (a class or function) under
        ``name``; registering a name twice raises a ValueError."""
        def deco(factory):
            if name in self._factories:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._factories[name] = factory
            return factory
        return deco

    def check(self, name: str, argument: str | None = None) -> None:
        """Raise a ValueError naming ``argument`` if ``name`` is unknown."""
        if name not in self._factories:
            arg = f"{argument}=" if argument else ""
            hint = _did_you_mean(name, self._factories)
            raise ValueError(f"unknown {self.kind} {arg}{name!r}{hint} "
                             f"(known: {', '.join(self.names())})")

    def get(self, name: str) -> Callable[..., Any]:
        """The factory registered as ``name`` (a ValueError, with the closest names, if none)."""
        self.check(name)
        return self._factories[name]

    def make(self, name: str, **kwargs) -> Any:
        """Call the factory registered as ``name`` with ``kwargs``, after checking them."""
        self.check_arguments(name, kwargs)
        return self.get(name)(**kwargs)

    def check_arguments(self, name: str, kwargs, injected: tuple = ()) -> None:
        """Check ``kwargs`` for ``name`` without building it: a TypeError naming the first
        keyword it does not take (``injected``: arguments lab passes itself, which a user may
        not), then each value against the factory's declaration (:mod:`lab.argspec`: a
        TypeError or ValueError naming the argument, the value and what is accepted)."""
        factory = self.get(name)
        if not isinstance(kwargs, dict):
            raise TypeError(f"{self.kind} {name!r}: keyword arguments must be a dict, got "
                            f"{type(kwargs).__name__}")
        takes = _arguments(factory)
        if takes is not None:
            takes = [t for t in takes if t not in injected]
            for k in kwargs:
                if k not in takes:
                    raise TypeError(f"{self.kind} {name!r}: unknown argument {k!r}"
                                    f"{_did_you_mean(k, takes)} "
                                    f"(its arguments: {', '.join(takes) or 'none'})")
        check_kwargs(factory, kwargs, owner=name)

    def arguments(self, name: str) -> dict:
        """The declared arguments of ``name``: argument -> :class:`lab.argspec.Arg` (its type,
        range or choices and meaning); empty for a factory that declares none."""
        return declared(self.get(name))

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._factories)

    def __contains__(self, name: str) -> bool:
        return name in self._factories


def _did_you_mean(word, choices) -> str:
    close = difflib.get_close_matches(str(word), choices, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _arguments(factory) -> list[str] | None:
    """The keyword arguments ``factory`` accepts, or None if it takes ``**kwargs`` (or has no
    signature Python can read)."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
