"""What a scheme remembers between steps, captured and restored: the protocol a checkpoint uses.

Aggregators, codecs, averaging schemes, schedules, attacks and controllers keep state between
steps: error-feedback residuals, PowerSGD's ``Q``, AR-Topk's leader statistics, momentum, the
position of their random generators. ``state_dict(obj)`` returns it as plain data (tensors
cloned, generators as their state), ``load_state_dict(obj, state)`` puts it back into a freshly
built object of the same config, so that the object then behaves bitwise as the original would.

An object that defines its own ``state_dict()`` / ``load_state_dict(state)`` (as
``torch.nn.Module`` and PyTorch's optimizers do) is asked; anything else gets the default: every
attribute in its ``__dict__`` that is data (tensors, numbers, strings, containers of them, random
generators) or a nested object of the same kind, recursively; what belongs to the run rather
than to the scheme (the collective, the model and its parameters, the optimizer, the engine,
threads, futures, functions) is left out and must come from the fresh object. A scheme whose
state hides where the default cannot see it (a closure, a Python generator, an in-flight
future) must define the two methods itself. A stateless object gives ``{}``.
"""
from __future__ import annotations

import copy
import random
import threading
import types

import numpy as np
import torch

__all__ = ["default_state", "load_default_state", "load_state_dict", "state_dict"]

_SCALARS = (bool, int, float, complex, str, bytes, type(None))


class _Obj(dict):
    """The state of a nested object of class ``cls`` (a plain ``dict`` attribute is kept as a
    ``dict``)."""

    def __init__(self, state: dict, cls: type):
        super().__init__(state)
        self.cls = cls


class _Rng:
    """A random generator's state: ``kind`` is 'torch', 'python' or 'numpy'."""

    def __init__(self, kind: str, state):
        self.kind, self.state = kind, state


class _Skip(Exception):
    """An attribute that belongs to the run, not to the scheme."""


def _excluded(v) -> bool:
    from .comm import Collective, CommLedger
    from .engine import Engine
    return isinstance(v, (Collective, CommLedger, Engine, torch.nn.Module, torch.nn.Parameter,
                          torch.optim.Optimizer, torch.futures.Future, threading.Thread,
                          types.FunctionType, types.MethodType, types.BuiltinFunctionType,
                          types.GeneratorType, type)) or callable(getattr(v, "wait", None)) \
        or type(v).__module__.startswith(("threading", "queue", "_thread"))


def _capture(v, seen: set):
    if isinstance(v, _SCALARS):
        return v
    if _excluded(v):
        raise _Skip
    if isinstance(v, torch.Tensor):
        return v.detach().clone()
    if isinstance(v, torch.Generator):
        return _Rng("torch", v.get_state())
    if isinstance(v, random.Random):
        return _Rng("python", v.getstate())
    if isinstance(v, np.random.Generator):
        return _Rng("numpy", copy.deepcopy(v.bit_generator.state))
    if isinstance(v, np.ndarray):
        return v.copy()
    if isinstance(v, (list, tuple)):
        return type(v)(_capture(x, seen) for x in v) if not hasattr(v, "_fields") else v
    if isinstance(v, dict):
        return {k: _capture(x, seen) for k, x in v.items()}
    if isinstance(v, (set, frozenset)):
        return type(v)(v)
    if getattr(type(v), "__dataclass_params__", None) is not None and type(v).__dataclass_params__.frozen:
        return v  # an immutable value (a Network...)
    if hasattr(v, "__dict__") or hasattr(v, "state_dict"):
        if id(v) in seen:
            raise _Skip  # a back-reference: its owner captures it
        return _Obj(state_dict(v, seen), type(v))
    raise _Skip


def state_dict(obj, _seen: set | None = None) -> dict:
    """``obj``'s state between steps, as data (see the module docstring): its own
    ``state_dict()`` if its class has one, else :func:`default_state`."""
    if callable(getattr(type(obj), "state_dict", None)):
        return obj.state_dict()
    return default_state(obj, _seen)


def default_state(obj, _seen: set | None = None) -> dict:
    """The default capture: every data attribute of ``obj`` (nested objects recursively)."""
    seen = (_seen or set()) | {id(obj)}
    out = {}
    for k, v in vars(obj).items():
        try:
            out[k] = _capture(v, seen)
        except _Skip:
            pass
    return out


def _restore(current, saved):
    if isinstance(saved, _Obj):
        if current is None:  # created lazily (a cache): made again from its state
            current = saved.cls.__new__(saved.cls)
        load_state_dict(current, dict(saved))
        return current
    if isinstance(saved, _Rng):
        if saved.kind == "torch":
            current.set_state(saved.state)
        elif saved.kind == "python":
            current.setstate(saved.state)
        else:
            current.bit_generator.state = saved.state
        return current
    if isinstance(saved, torch.Tensor):
        return saved.clone()
    if isinstance(saved, dict):
        cur = current if isinstance(current, dict) else {}
        return {k: _restore(cur.get(k), x) for k, x in saved.items()}
    if isinstance(saved, (list, tuple)) and not hasattr(saved, "_fields"):
        cur = list(current) if isinstance(current, (list, tuple)) and len(current) == len(saved) \
            else [None] * len(saved)
        return type(saved)(_restore(c, x) for c, x in zip(cur, saved))
    return copy.copy(saved)


def load_state_dict(obj, state: dict) -> None:
    """Put ``state`` (from :func:`state_dict`) back into ``obj``, a freshly built object of the
    same config: its own ``load_state_dict`` if its class has one, else
    :func:`load_default_state`."""
    if callable(getattr(type(obj), "load_state_dict", None)):
        obj.load_state_dict(state)
    else:
        load_default_state(obj, state)


def load_default_state(obj, state: dict) -> None:
    """The default restore: generators are set, nested objects restored in place, the rest
    assigned."""
    for k, saved in state.items():
        setattr(obj, k, _restore(getattr(obj, k, None), saved))
