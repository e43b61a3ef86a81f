"""Declared arguments: each argument's type, range or choices and meaning, written once and
checked where the argument is given, by the Python API and by the command line alike.

A class or function declares its arguments with :func:`takes`::

    @register("topk")
    @takes(density=Arg(float, gt=0, le=1, help="kept fraction k/n"),
           k=Arg(int, ge=1, none=True, help="values kept, instead of density"))
    class TopK(SparseCodec): ...

Every call (``TopK(density=...)``, ``compress.make("topk", ...)``) then checks the arguments it
is given before the body runs (defaults are the author's and are tested once, not per call);
``rule=`` adds a check across arguments (``dim`` divisible by ``heads``). The declaration stays
on the factory (``ARGS``, ``RULE``), so ``lab.registry.Registry.check_arguments`` checks a
keyword dictionary without building anything (an aggregator's ``aggregator_kw`` when a
``TrainConfig`` is made, before any process starts), and :func:`setting` declares a config's
field the same way. The command line's number types (``lab.cli.args.integer``, ``number``)
are :meth:`Arg.parse`.

The rules: ``bool`` is never a number and a number never a bool; a string is never read as a
number (``"0.1"`` is refused, not converted); a float is finite unless declared otherwise; NaN
never passes a range. A wrong argument raises :class:`ArgumentTypeError` (a ``TypeError``) or
:class:`ArgumentError` (a ``ValueError``) naming the class or function, the argument, the value
and what is accepted: ``dgc: momentum must be a finite number in [0, 1), got 'abc' (str)``.
An :class:`ArgumentTypeError` is a ``ValueError`` too, so code that catches ``ValueError`` for
any refused setting (the command line's exit status 2) catches both.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import numbers


class ArgumentError(ValueError):
    """An argument out of its range or not among its choices. ``owner``, ``name``, ``value``
    and ``accepted`` (what it takes, in words) are kept as attributes. Given a message alone,
    it is that message (``within``)."""

    def __init__(self, owner: str, name: str | None = None, value=None, accepted: str = "",
                 shown: str | None = None):
        self.owner, self.name, self.value, self.accepted = owner, name, value, accepted
        if name is None:
            self.shown = ""
            super().__init__(owner)
            return
        self.shown = shown or self.show(value)  # the value as the message shows it
        who = f"{owner}: " if owner else ""
        super().__init__(f"{who}{name} must be {accepted}, got {self.shown}")

    @staticmethod
    def show(value) -> str:
        text = repr(value)
        return text if len(text) <= 80 else text[:77] + "..."


class ArgumentTypeError(ArgumentError, TypeError):
    """An argument of the wrong type (a ``TypeError``, and a ``ValueError`` like every refused
    argument); the message adds the value's type."""

    @staticmethod
    def show(value) -> str:
        return f"{ArgumentError.show(value)} ({type(value).__name__})"


def within(error: Exception, where: str) -> ArgumentError:
    """``error`` said of ``where`` (``"compressor_kw: ..."``): an :class:`ArgumentError`, an
    :class:`ArgumentTypeError` where ``error`` was a TypeError, for re-raising a nested
    argument's error at the level of the setting that holds it."""
    cls = ArgumentTypeError if isinstance(error, TypeError) else ArgumentError
    return cls(f"{where}: {error}")


_NOUNS = {int: "an int", float: "a number", bool: "True or False", str: "a string",
          dict: "a dict", tuple: "a list or tuple", object: "anything"}


def _num(v) -> str:
    if isinstance(v, int):
        return f"2**{v.bit_length() - 1}" if v >= 2 ** 16 and not v & (v - 1) else str(v)
    return f"{v:g}"


class Arg:
    """One argument: ``type`` (``int``, ``float``, ``bool``, ``str``, ``dict``, ``tuple`` for a
    list or tuple, any class or tuple of classes), a range (``ge``, ``gt``, ``le``, ``lt``),
    ``choices`` (a collection, or a function returning one, read when checked), ``none``
    (None also accepted), ``finite`` (floats; True unless given), ``also`` (other values
    accepted as they are: ``also=(math.inf, "inf")``), ``of`` (an :class:`Arg` every element of a
    list or tuple must pass) and ``help``, what it means."""

    __slots__ = ("type", "ge", "gt", "le", "lt", "choices", "none", "finite", "also", "of", "help")

    def __init__(self, type=object, *, ge=None, gt=None, le=None, lt=None, choices=None,
                 none: bool = False, finite: bool = True, also: tuple = (), of: "Arg | None" = None,
                 help: str = ""):
        self.type, self.ge, self.gt, self.le, self.lt = type, ge, gt, le, lt
        self.choices, self.none, self.finite = choices, none, finite
        self.also, self.of, self.help = tuple(also), of, help

    # -- what it accepts, in words ---------------------------------------------------------
    def accepted(self) -> str:
        """What this argument accepts, as the end of "must be ..."."""
        choices = self._choices()
        if choices is not None:
            text = "one of " + ", ".join(repr(c) for c in choices)
        else:
            t = self.type
            if isinstance(t, type) and t in _NOUNS:
                text = _NOUNS[t]
            else:
                classes = t if isinstance(t, tuple) else (t,)
                text = " or ".join(f"a {c.__name__}" for c in classes)
            if t is float and self.finite:
                text = "a finite number"
            bounds = self.bounds()
            if bounds:
                text += f" {bounds}"
            if self.of is not None:
                text += f" of {self.of.accepted()}"
        extra = [repr(a) for a in self.also] + (["None"] if self.none else [])
        return text + "".join(f" or {e}" for e in extra)

    def bounds(self) -> str:
        """The range in words: ">= 1", "in (0, 1]", "" for none."""
        lo = (self.gt, "(", ">") if self.gt is not None else (self.ge, "[", ">=")
        hi = (self.lt, ")", "<") if self.lt is not None else (self.le, "]", "<=")
        if lo[0] is not None and hi[0] is not None:
            return f"in {lo[1]}{_num(lo[0])}, {_num(hi[0])}{hi[1]}"
        if lo[0] is not None:
            return f"{lo[2]} {_num(lo[0])}"
        return f"{hi[2]} {_num(hi[0])}" if hi[0] is not None else ""

    def _choices(self):
        c = self.choices
        return tuple(c()) if callable(c) else c

    def __repr__(self) -> str:
        meaning = f": {self.help}" if self.help else ""
        return f"<{self.accepted()}{meaning}>"

    # -- the check ---------------------------------------------------------------------------
    def check(self, value, name: str, owner: str = ""):
        """``value`` if it passes, else an :class:`ArgumentTypeError` or :class:`ArgumentError`
        naming ``owner``, ``name``, the value and what is accepted."""
        if value is None:
            if self.none:
                return value
            raise ArgumentTypeError(owner, name, value, self.accepted())
        if self.also and not isinstance(value, bool) and any(
                value == a and type(value) is type(a) for a in self.also):
            return value
        t = self.type
        if t is int:
            ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
        elif t is float:
            ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
        elif t is bool:
            ok = value is True or value is False
        elif t is tuple:
            ok = isinstance(value, (tuple, list))
        elif t is object:
            ok = True
        else:
            ok = isinstance(value, t)
        if not ok:
            raise ArgumentTypeError(owner, name, value, self.accepted())
        if t is int or t is float:
            try:
                bad = value != value or (t is float and self.finite and not math.isfinite(value))
            except OverflowError:  # an int beyond any float
                bad = True
            if bad or (self.ge is not None and not value >= self.ge) \
                    or (self.gt is not None and not value > self.gt) \
                    or (self.le is not None and not value <= self.le) \
                    or (self.lt is not None and not value < self.lt):
                raise ArgumentError(owner, name, value, self.accepted())
        choices = self._choices()
        if choices is not None and value not in choices:
            raise ArgumentError(owner, name, value, self.accepted())
        if self.of is not None:
            for i, v in enumerate(value):
                self.of.check(v, f"{name}[{i}]", owner)
        return value

    def parse(self, text: str, name: str = "", owner: str = ""):
        """The value a command line's ``text`` spells, checked: ``int`` reads digits (``"1.0"``
        and ``"1e3"`` are refused), ``float`` a number, ``bool`` true/false, ``str`` the text,
        ``"none"`` None where None is accepted; an error shows the text as typed."""
        s = text.strip()
        if self.none and s.lower() == "none":
            return None
        for a in self.also:
            if s.lower() == str(a).lower():
                return a
        try:
            if self.type is int:
                value = int(s)
            elif self.type is float:
                value = float(s)
            elif self.type is bool:
                value = {"true": True, "false": False}[s.lower()]
            elif self.type is str or self.type is object:
                value = text
            else:
                raise ValueError(text)
        except (ValueError, KeyError):
            raise ArgumentTypeError(owner, name, text, self.accepted(),
                                    shown=repr(text)) from None
        try:
            return self.check(value, name, owner)
        except ArgumentError as e:
            raise type(e)(owner, name, value, e.accepted, shown=text) from None


#: A random seed: an int in [0, 2**32) (every generator takes it; sums with ranks and steps
#: stay in the range torch's generators accept).
SEED = Arg(int, ge=0, lt=2 ** 32, help="random seed")


def owner_of(target) -> str:
    """How errors name a class or function: its registered ``name`` where it has one (a
    codec's "topk"), else its ``__name__``."""
    name = getattr(target, "name", None)
    if isinstance(target, type) and isinstance(name, str) and name and name != "base":
        return name
    return getattr(target, "__name__", str(target))


def takes(rule=None, **args: Arg):
    """Class or function decorator: check the arguments in ``args`` (name -> :class:`Arg`) at
    every call, before the body runs. ``rule(values)``, given every argument by name (the
    defaults filled in), returns a message (a ValueError naming the owner) or None: a check
    across arguments. A class's declaration extends its parent's; the declaration is kept on the
    factory as ``ARGS`` and ``RULE``. Declaring an argument the factory does not take raises at
    import."""
    def deco(target):
        is_class = isinstance(target, type)
        fn = target.__dict__.get("__init__") if is_class else target
        if fn is None:
            raise TypeError(f"@takes: {target.__name__} defines no __init__ of its own")
        sig = inspect.signature(fn)
        names = [p.name for p in sig.parameters.values()
                 if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        wrong = [k for k in args if k not in names]
        if wrong:
            raise TypeError(f"@takes: {target.__name__} declares {wrong}, which it does not take "
                            f"(its arguments: {', '.join(names)})")
        parent = getattr(target, "ARGS", {}) if is_class else {}
        declared = {**{k: v for k, v in parent.items() if k in names}, **args}
        positional = [p.name for p in sig.parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]

        @functools.wraps(fn)
        def checked(*a, **kw):
            owner = owner_of(type(a[0])) if is_class else fn.__name__
            for name, value in zip(positional, a):
                spec = declared.get(name)
                if spec is not None:
                    spec.check(value, name, owner)
            for name, value in kw.items():
                spec = declared.get(name)
                if spec is not None:
                    spec.check(value, name, owner)
            if rule is not None:
                try:
                    bound = sig.bind(*a, **kw)
                except TypeError:
                    pass  # the call itself raises it, naming the argument
                else:
                    bound.apply_defaults()
                    _apply(rule, bound.arguments, owner)
            return fn(*a, **kw)

        checked.ARGS, checked.RULE = declared, rule
        if is_class:
            target.__init__ = checked
            target.ARGS, target.RULE = declared, rule
            return target
        return checked
    return deco


def _apply(rule, values: dict, owner: str) -> None:
    message = rule(values)
    if message:
        raise ValueError(f"{owner}: {message}")


def declared(factory) -> dict:
    """``factory``'s declared arguments: name -> :class:`Arg` (empty if it declares none)."""
    return dict(getattr(factory, "ARGS", None) or {})


#: The first line of the section :func:`describe` writes (how :func:`document` finds it).
ARGUMENTS_HEADING = "Arguments (from the declaration, checked at every call):"


def describe(factory) -> str:
    """The "Arguments" section of ``factory``'s docstring, written from its declaration: one
    reStructuredText bullet per argument of its signature, with the default, what it accepts
    and what it means, so the reference cannot drift from what is checked. An argument the
    declaration leaves out reads "not declared" (``tests/test_codec_args.py`` refuses that
    for a codec)."""
    fn = factory.__init__ if isinstance(factory, type) else factory
    args = declared(factory)
    lines = [ARGUMENTS_HEADING, ""]
    for i, p in enumerate(inspect.signature(fn).parameters.values()):
        if (i == 0 and isinstance(factory, type)) or p.kind is p.VAR_POSITIONAL:
            continue  # self, *args
        if p.kind is p.VAR_KEYWORD:
            lines.append(f"- ``**{p.name}``: further keyword arguments (see above)")
            continue
        spec = args.get(p.name)
        default = "" if p.default is p.empty else f" (default ``{p.default!r}``)"
        what = "not declared" if spec is None else \
            f"{spec.help or 'no description'}; accepts {spec.accepted()}"
        lines.append(f"- ``{p.name}``{default}: {what}")
    return "\n".join(lines)


def document(factory):
    """Append :func:`describe`'s section to ``factory``'s docstring (once; a second call
    changes nothing) and return ``factory``."""
    doc = inspect.cleandoc(factory.__doc__ or "")
    if ARGUMENTS_HEADING not in doc:
        factory.__doc__ = f"{doc}\n\n{describe(factory)}\n" if doc else describe(factory)
    return factory


def check_kwargs(factory, kwargs: dict, owner: str | None = None) -> None:
    """Check the values of ``kwargs`` against ``factory``'s declaration, and its rule with the
    defaults filled in, without calling it (names are the caller's to check:
    ``lab.registry.Registry.check_arguments``)."""
    owner = owner or owner_of(factory)
    args = declared(factory)
    for name, value in kwargs.items():
        spec = args.get(name)
        if spec is not None:
            spec.check(value, name, owner)
    rule = getattr(factory, "RULE", None)
    if rule is not None:
        fn = factory.__init__ if isinstance(factory, type) else factory
        try:
            params = inspect.signature(fn).parameters.values()
        except (TypeError, ValueError):
            return
        values = {p.name: p.default for p in params if p.default is not p.empty}
        values.update(kwargs)
        _apply(rule, values, owner)


# -- configs: a dataclass field with its declaration --------------------------------------------
def setting(default, arg: Arg, **kw) -> dataclasses.Field:
    """A dataclass field with its :class:`Arg` (``lr: float = setting(0.1, Arg(float, gt=0))``):
    ``check_settings`` checks every such field of a config. A dict or list default is
    copied for each instance."""
    meta = {"arg": arg}
    if isinstance(default, (dict, list, set)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=meta,
                                 **kw)
    return dataclasses.field(default=default, metadata=meta, **kw)


def check_settings(config) -> None:
    """Check every field of the dataclass instance ``config`` declared with :func:`setting`,
    in the order of the fields; errors name the config's class."""
    owner = type(config).__name__
    for f in dataclasses.fields(config):
        arg = f.metadata.get("arg")
        if arg is not None:
            arg.check(getattr(config, f.name), f.name, owner)


def settings(config_class) -> dict:
    """A config class's declared fields: name -> :class:`Arg`."""
    return {f.name: f.metadata["arg"] for f in dataclasses.fields(config_class)
            if "arg" in f.metadata}
