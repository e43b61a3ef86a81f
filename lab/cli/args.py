"""Parsing helpers shared by the subcommands of ``python -m lab``.

Each helper is an argparse ``type``: it runs while the command line is parsed, before any
process starts, and a bad value becomes argparse's own error, which names the flag and exits
with status 2, in one line (:class:`Parser`, every subcommand's parser). Names are checked
against every registry of the library, so a misspelt name gets a did-you-mean and a name of
another kind gets a pointer to the flag that takes it (``--aggregator atomo``: atomo is a
compressor, use ``--compressor atomo``); numbers say their range. Numbers are read by
:meth:`lab.argspec.Arg.parse`, the declaration the Python API checks too (``arg_type`` makes a
flag's type of any declaration, e.g. a ``TrainConfig`` field's:
``arg_type(settings(TrainConfig)["lr"])``), and ``K=V`` values are checked by the library
against the named scheme's declaration when the config is made.
"""
from __future__ import annotations

import argparse
import ast
import difflib
import math
import pathlib

from ..argspec import Arg, ArgumentError

#: kind -> (what one is called, the flag that takes it, the commands that have that flag, its
#: group). A name of another kind of the same group gets a pointer to that kind's flag; the
#: names of a kind come from its registry (see :func:`names`), read when first needed.
KINDS = {
    "model": ("model", "--model", ("train", "pipeline", "ensemble", "advise"), "workload"),
    "data": ("data set", "--data", ("train", "pipeline", "ensemble"), "workload"),
    "compressor": ("compressor", "--compressor", ("train",), "method"),
    "aggregator": ("aggregator", "--aggregator", ("train",), "method"),
    "schedule": ("data-parallel schedule", "--schedule", ("train",), "method"),
    "averaging": ("averaging scheme", "--averaging", ("train",), "method"),
    "sync": ("sync mode", "--sync", ("train",), "method"),
    "attack": ("attack", "--attack", ("train",), "method"),
    "network": ("network preset", "--network", ("train", "pipeline", "advise"), "method"),
    "pipeline-schedule": ("pipeline schedule", "--schedule", ("pipeline",), "method"),
    "dp": ("pipeline data-axis mode", "--dp", ("pipeline",), "method"),
    "optimizer": ("optimizer", "--optimizer", ("train",), "optimizer"),
    "pipeline-optimizer": ("pipeline optimizer", "--optimizer", ("pipeline",), "optimizer"),
    "lr-schedule": ("learning-rate schedule", "--lr-schedule", ("pipeline",), "optimizer"),
    "problem": ("Hogwild problem", "--problem", ("hogwild",), "problem"),
    "method": ("advisor method", "--methods", ("advise",), "advisor"),
}


def names(kind: str) -> list[str]:
    """The names a flag of ``kind`` (a key of :data:`KINDS`) accepts, from the library's
    registries (imported here, so building a parser imports nothing heavy)."""
    from .. import aggregate, attack, averaging, compress, data, models, schedule, sync
    if kind in ("model", "data", "compressor"):
        return {"model": models.names, "data": data.names, "compressor": compress.names}[kind]()
    regs = {"aggregator": aggregate, "schedule": schedule, "averaging": averaging,
            "sync": sync, "attack": attack}
    if kind in regs:
        return regs[kind].REGISTRY.names()
    if kind == "network":
        from ..comm import PRESETS
        return list(PRESETS)
    if kind in ("pipeline-schedule", "dp", "pipeline-optimizer", "lr-schedule"):
        from ..pipeline.config import DP_MODES, OPTIMIZERS, SCHEDULES
        from ..pipeline.lr import LR_SCHEDULES
        return list({"pipeline-schedule": SCHEDULES, "dp": DP_MODES,
                     "pipeline-optimizer": OPTIMIZERS, "lr-schedule": LR_SCHEDULES}[kind])
    if kind == "optimizer":
        from ..run.config import OPTIMIZERS
        return list(OPTIMIZERS)
    if kind == "problem":
        from ..sync.hogwild import PROBLEMS
        return list(PROBLEMS)
    if kind == "method":
        from ..advise import METHODS
        return list(METHODS)
    raise KeyError(f"no kind of name {kind!r} (kinds: {', '.join(KINDS)})")


def _norm(s) -> str:
    return str(s).lower().replace("-", "_")


def _close(value: str, choices) -> tuple[str | None, float]:
    """The choice ``value`` most likely meant and how alike they are (1: equal up to case and
    '-' vs '_'; else difflib's ratio, at least 0.6), or (None, 0)."""
    best, score = None, 0.0
    for c in choices:
        r = difflib.SequenceMatcher(None, _norm(value), _norm(c)).ratio()
        if r > score:
            best, score = c, r
    return (best, score) if score >= 0.6 else (None, 0.0)


def _use(kind: str, value: str, command: str) -> str:
    """How to pass ``value`` as a ``kind`` from ``command``: '--flag value', or the command
    line of the subcommand that has the flag."""
    _, flag, commands, _ = KINDS[kind]
    return f"{flag} {value}" if command in commands else \
        f"python -m lab {commands[0]} {flag} {value}"


def name_of(kind: str, value: str, command: str = "train", extra: tuple = ()) -> str:
    """``value`` if it names a ``kind`` (a key of :data:`KINDS`) or is one of ``extra``, else an
    ``argparse.ArgumentTypeError`` saying what it is instead: a name of another kind of the same
    group, with the flag that takes it ("'atomo' is a compressor, not an aggregator: use
    --compressor atomo"); or the closest name ("did you mean 'topk'?"); and the names there
    are. As an argparse type (see :func:`kind_type`), argparse names the flag and exits."""
    known = [*extra, *names(kind)]
    if value in known:
        return value
    noun, group = KINDS[kind][0], KINDS[kind][3]
    kin = [k for k in KINDS if k != kind and KINDS[k][3] == group]
    off = value == "none"  # "off" for several kinds: no pointer to them
    elsewhere = [k for k in kin if not off and value in names(k)]
    if elsewhere:
        what = " or ".join(_a(KINDS[k][0]) for k in elsewhere)
        use = " or ".join(_use(k, value, command) for k in elsewhere)
        raise argparse.ArgumentTypeError(f"{value!r} is {what}, not {_a(noun)}: use {use}")
    hint, score = _close(value, known)
    hint = repr(hint) if hint else ""
    for k in [] if off else kin:  # a misspelt name of another kind, if closer
        other, s = _close(value, names(k))
        if other is not None and s > score:
            hint, score = f"the {KINDS[k][0]} {other!r} ({_use(k, other, command)})", s
    did = f"; did you mean {hint}?" if hint else ""
    raise argparse.ArgumentTypeError(f"unknown {noun} {value!r}{did} (known: {', '.join(known)})")


def _a(noun: str) -> str:
    return ("an " if noun[0] in "aeiou" else "a ") + noun


def kind_type(kind: str, command: str = "train", extra: tuple = ()):
    """An argparse ``type`` that checks a name with :func:`name_of`."""
    def check(value: str) -> str:
        return name_of(kind, value, command, extra)
    check.__name__ = KINDS[kind][0]
    return check


def network_type(command: str = "train"):
    """An argparse ``type`` for a link: a preset, 'BANDWIDTH[,LATENCY]' or 'none'; a name that
    is not a link gets a did-you-mean or a pointer, like :func:`name_of`."""
    def check(value: str) -> str:
        from ..comm import Network
        try:
            Network.parse(value)
        except ValueError as e:
            if "needs a unit" not in str(e) and "out of range" not in str(e):  # not a rate
                try:
                    name_of("network", value, command)
                except argparse.ArgumentTypeError as named:
                    if "did you mean" in str(named) or " is a" in str(named):
                        raise named from None
            raise argparse.ArgumentTypeError(str(e)) from None
        return value
    check.__name__ = "network"
    return check


def network_schedule(value: str) -> str:
    """An argparse ``type`` for 'LINK:STEPS LINK:STEPS ...' (each LINK as for ``--network``)."""
    from ..comm import NetworkSchedule
    try:
        NetworkSchedule.parse(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value


def arg_type(arg: Arg, name: str = "value"):
    """An argparse ``type`` reading a flag's text with ``arg`` (:meth:`Arg.parse`): the same
    declaration, so the same values, as the Python API; argparse names the flag."""
    def check(text: str):
        try:
            return arg.parse(text)
        except ArgumentError as e:
            raise argparse.ArgumentTypeError(f"must be {e.accepted}, got {e.shown}") from None
    check.__name__ = {int: "int", float: "float", bool: "bool"}.get(arg.type, name)
    return check


def integer(lo: int | None = None, hi: int | None = None):
    """An argparse ``type``: an int in [lo, hi] (either end may be open: None)."""
    return arg_type(Arg(int, ge=lo, le=hi))


def number(lo: float | None = None, hi: float | None = None, *, lo_open: bool = False,
           hi_open: bool = False):
    """An argparse ``type``: a finite float between lo and hi (each bound included unless
    ``lo_open``/``hi_open``; None: no bound)."""
    return arg_type(Arg(float, ge=None if lo_open else lo, gt=lo if lo_open else None,
                        le=None if hi_open else hi, lt=hi if hi_open else None))


#: words a command line spells Python's constants with (``warmup=false``, ``ema=none``)
_WORDS = {"true": True, "false": False, "none": None, "inf": math.inf, "-inf": -math.inf}


def key_value(item: str) -> tuple[str, object]:
    """An argparse ``type`` for one K=V item: (K, V), V read as a Python literal where it is
    one (``density=0.01``, ``ema=None``; ``true``, ``false``, ``none`` and ``inf`` in any case
    too), else kept as a string. ``dict(list)`` makes the keyword dictionary; the library checks
    K and V against the named scheme's declaration (a string where a number or a bool is
    declared is refused, naming the argument)."""
    k, sep, v = item.partition("=")
    if not sep or not k:
        raise argparse.ArgumentTypeError(f"takes key=value pairs, got {item!r}")
    if v.strip().lower() in _WORDS:
        return k, _WORDS[v.strip().lower()]
    try:
        return k, ast.literal_eval(v)
    except (ValueError, SyntaxError):
        return k, v


def rank_factor(item: str) -> tuple[int, float]:
    """An argparse ``type`` for one RANK=FACTOR item (a straggler: rank computes FACTOR times
    slower): RANK an int >= 0, FACTOR a number >= 1."""
    k, sep, v = item.partition("=")
    try:
        rank, factor = int(k), float(v)
    except ValueError:
        rank, factor = -1, float("nan")
    if not sep or rank < 0 or not factor >= 1 or not math.isfinite(factor):
        raise argparse.ArgumentTypeError(f"takes RANK=FACTOR pairs, RANK an int >= 0 and "
                                         f"FACTOR a number >= 1, got {item!r}")
    return rank, factor


def folder(text: str) -> pathlib.Path:
    """An argparse ``type``: a folder that exists."""
    p = pathlib.Path(text)
    if not p.is_dir():
        raise argparse.ArgumentTypeError(f"no such folder: {text!r}")
    return p


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line, as every other error of ``python -m
    lab``: ``PROG: error: MESSAGE (see PROG --help)``, exit status 2, without the usage block
    argparse prints first (``--help`` still prints it). An unknown flag gets a did-you-mean.
    Under torchrun only each node's first rank says it (``lab.cli.formatting.quiet``)."""

    def error(self, message: str):
        """Say ``message`` in one line and exit with status 2."""
        from .formatting import quiet, tell_torchrun
        line = f"{self.prog}: error: {message} (see {self.prog} --help)"
        tell_torchrun(line)
        self.exit(2, None if quiet() else line + "\n")

    def parse_args(self, args=None, namespace=None):
        """argparse's parse, an unknown flag refused with a did-you-mean."""
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            self.error(unrecognized(extras, self._option_string_actions))
        return ns


def unrecognized(extras: list[str], options) -> str:
    """argparse's 'unrecognized arguments' message for ``extras``, with the flag of
    ``options`` (option strings) each misspelt flag most likely meant."""
    hints = {}
    for x in extras:
        flag = x.split("=", 1)[0]
        if flag.startswith("--") and flag not in hints:
            hint = _close(flag, [o for o in options if o.startswith("--")])[0]
            if hint:
                hints[flag] = hint
    noun = "argument" if len(extras) == 1 else "arguments"
    said = f"unrecognized {noun}: {' '.join(extras)}"
    if len(hints) == 1:
        return f"{said}; did you mean {next(iter(hints.values()))}?"
    if hints:
        return f"{said}; did you mean {', '.join(f'{h} for {f}' for f, h in hints.items())}?"
    return said


def parser(prog: str, doc: str | None) -> argparse.ArgumentParser:
    """A :class:`Parser` for ``python -m lab NAME``, its description (the subcommand's
    docstring, with examples) kept as written."""
    return Parser(prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
