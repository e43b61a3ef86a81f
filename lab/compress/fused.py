"""Fused GPU kernels for the elementwise cores of codecs (issue 8), eager torch as reference.

A codec's core (scale, round stochastically, pack) is a chain of elementwise passes; in eager
torch each pass is one kernel that reads and writes the whole tensor, so on a GPU the chain
costs many times a memory copy. ``torch.compile`` fuses the chain into a few kernels. The
plain function stays the readable reference (``fn.reference``), runs on the CPU (no compile
stalls in CPU notebooks), on small tensors, on sizes seen only once, and wherever compiling
fails. The one-off compile (a few seconds) is paid once per tensor size.
Set ``LAB_FUSE=0`` to turn fusion off.
"""
from __future__ import annotations

import functools
import os
import warnings

import torch

FUSE_MIN_NUMEL = 2 ** 18  # below this, launch overhead dominates and compiling is not worth it
MAX_SHAPES = 8  # compiled versions per function (torch's own recompile limit is 8)
# devices whose tensors are compiled: not the CPU, so CPU notebooks never stall on a compile
# (the tests add "cpu" to check the compiled code where CI can run it)
FUSE_DEVICES = {"cuda"}


def on_device_path(x: torch.Tensor) -> bool:
    """Whether a stochastic codec takes its device path for ``x`` (uniforms drawn where ``x``
    lives, then its fused core): on ``FUSE_DEVICES`` (CUDA; the tests add the CPU, so CI runs
    the same code)."""
    return x.device.type in FUSE_DEVICES


def fused(fn):
    """Run ``fn`` compiled on tensors of ``FUSE_DEVICES`` (CUDA) when its largest tensor argument
    has at least ``FUSE_MIN_NUMEL`` elements, else as is.

    A version is compiled for a call signature (shapes, dtypes, int arguments) the second time
    it is seen, so sizes that change every call (data-dependent payloads) never pay a compile,
    and the tensors of a training step, the same every step, do once."""
    state = {"compiled": None, "failed": False, "seen": set(), "ready": set()}

    @functools.wraps(fn)
    def call(x, *args):
        # the size of the work is its largest tensor (a decoder's first argument may be a
        # short one: QSGD's norms, one per bucket, kept its decode eager on the GPU check)
        if (x.device.type not in FUSE_DEVICES or state["failed"]
                or max(a.numel() for a in (x, *args) if isinstance(a, torch.Tensor)) < FUSE_MIN_NUMEL
                or os.environ.get("LAB_FUSE", "1") == "0"):
            return fn(x, *args)
        key = tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else a
                    for a in (x, *args))
        if key not in state["ready"]:
            if key not in state["seen"] or len(state["ready"]) >= MAX_SHAPES:
                state["seen"].add(key)
                return fn(x, *args)
            state["ready"].add(key)
        if state["compiled"] is None:
            state["compiled"] = torch.compile(fn, dynamic=False)
        try:
            return state["compiled"](x, *args)
        except Exception as err:  # no compiler toolchain, unsupported op...: stay correct
            state["failed"] = True
            warnings.warn(f"{fn.__name__}: torch.compile failed ({err!r:.200}); "
                          "running the eager reference")
            return fn(x, *args)

    call.reference = fn
    call.state = state  # which signatures are compiled, and whether compiling failed
    return call
