"""A published model's compute measured on a device, layer by layer (issue 52, item 5).

:mod:`lab.sim.models` gives each published model's layers as (shape, forward FLOPs per
sample), and prices a step at FLOPs over a stated device rate. Where a device is at hand, this
module measures instead: every layer that does arithmetic is run as the op its shape and FLOPs
describe, forward and backward, at the step's batch, on that device:

- a 4-D weight ``(cout, cin, k, k)`` is a convolution, stride 1 and ``k // 2`` padding, whose
  output side ``hw`` follows from the FLOPs (``2 cout cin k^2 hw^2`` per sample) — the same
  arithmetic as the network's own layer, without its stride, so no network code is needed;
- a 2-D weight ``(out, in)`` is a matrix product of ``rows = FLOPs / (2 out in)`` rows per
  sample (1 for a classifier, the tokens for BERT's and Sockeye's matrices);
- layers with no FLOPs (biases, norms, embeddings) are left out, as the FLOPs model leaves them.

Tensors are fp32 at torch's default precision settings (on a GPU: cuDNN may use TF32 for the
convolutions, matrix products stay fp32), the settings a reader's own run gets.

:func:`layer_profile` times each layer on its own; :func:`stack_step` times all of them in one
forward and one backward pass, the step the per-layer sum predicts. A layer profile measured on
a GPU (the GPU check's ``sim`` section stores one) gives :func:`lab.sim.models.scenario` its
compute with ``compute_s``, in place of the FLOP rate. ``scale`` shrinks spatial sides and rows
(the CPU dry run); 1.0 is the model as published.
"""
from __future__ import annotations

import math
import statistics
import time

import torch
import torch.nn.functional as F


def ops(name: str, batch: int, scale: float = 1.0) -> list[dict]:
    """The layers of ``name`` that do arithmetic, as ops: ``{"kind", "shape", "flops", ...}``,
    ``flops`` being forward FLOPs of the whole batch at ``scale``."""
    from .models import layers
    if not (isinstance(batch, int) and batch >= 1):
        raise ValueError(f"batch must be an int >= 1, got {batch!r}")
    if not (0 < scale <= 1):
        raise ValueError(f"scale must be in (0, 1], got {scale!r}")
    out = []
    for shape, flops in layers(name):
        if flops <= 0:
            continue
        if len(shape) == 4:
            cout, cin, k, _ = shape
            hw = max(1, round(math.sqrt(flops / (2.0 * cout * cin * k * k)) * scale))
            out.append({"kind": "conv", "shape": list(shape), "hw": hw,
                        "flops": 2.0 * cout * cin * k * k * hw * hw * batch})
        elif len(shape) == 2:
            o, i = shape
            rows = max(1, round(flops / (2.0 * o * i) * scale))
            out.append({"kind": "matmul", "shape": list(shape), "rows": rows * batch,
                        "flops": 2.0 * o * i * rows * batch})
        else:
            raise ValueError(f"a layer of {name} with FLOPs has shape {shape}: not 2-D or 4-D")
    return out


def _tensors(op: dict, batch: int, device: str):
    g = torch.Generator(device="cpu").manual_seed(0)
    if op["kind"] == "conv":
        cout, cin, k, _ = op["shape"]
        x = torch.randn(batch, cin, op["hw"], op["hw"], generator=g).to(device)
    else:
        cout, cin = op["shape"]
        x = torch.randn(op["rows"], cin, generator=g).to(device)
    w = (torch.randn(*op["shape"], generator=g) * 0.01).to(device).requires_grad_(True)
    return x.requires_grad_(True), w


def _forward(op: dict, x, w):
    return F.conv2d(x, w, padding=op["shape"][2] // 2) if op["kind"] == "conv" else x @ w.t()


def _run(op: dict, x, w):
    y = _forward(op, x, w)
    y.backward(torch.ones_like(y))   # the input's gradient too: a layer inside a network has one


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _timed(fn, device: str, repeats: int) -> float:
    fn()   # a warm-up: kernels chosen, memory allocated
    times = []
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def layer_profile(name: str, batch: int = 32, device: str = "cpu", scale: float = 1.0,
                  repeats: int = 5) -> dict:
    """Forward + backward seconds of each arithmetic layer of ``name`` on ``device`` (median of
    ``repeats``), their sum, and the rate the sum achieves (3 x forward FLOPs / seconds)."""
    rows = []
    for op in ops(name, batch, scale):
        x, w = _tensors(op, batch, device)
        s = _timed(lambda: _run(op, x, w), device, repeats)
        rows.append({**op, "seconds": s})
        del x, w
    total = sum(r["seconds"] for r in rows)
    flops = sum(r["flops"] for r in rows)
    return {"model": name, "batch": batch, "device": device, "scale": scale, "layers": rows,
            "compute_s": total, "tflops": 3 * flops / total / 1e12 if total else float("nan")}


def stack_step(name: str, batch: int = 32, device: str = "cpu", scale: float = 1.0,
               repeats: int = 3) -> float:
    """Seconds of one forward pass through every arithmetic layer of ``name`` and one backward
    pass through all of them (the step :func:`layer_profile`'s sum predicts)."""
    made = [(op, *_tensors(op, batch, device)) for op in ops(name, batch, scale)]

    def step():
        torch.stack([_forward(op, x, w).sum() for op, x, w in made]).sum().backward()
    return _timed(step, device, repeats)
