"""Parameters and gradients as views of one flat buffer each, layer after layer, as a
communication library lays out its buckets (PyTorch DDP's ``gradient_as_bucket_view``).

The overlap engine (:mod:`lab.schedule.overlap`) then reads a layer's gradient, and writes
its mean back, as one slice of the buffer: no copy to gather a layer before it is sent, none
to scatter it into the parameters' ``.grad`` after. The model, its optimizer and a
checkpoint see the same ``Parameter`` objects as before; only their storage moved.
"""
from __future__ import annotations

import torch


def flatten(layers) -> tuple[torch.Tensor, list[tuple[int, int]]] | None:
    """Move every parameter of ``layers`` (``[(module, [params])]``, in order) and its
    gradient into one buffer each; returns the gradient buffer and each layer's
    ``(start, stop)`` in it, or None (nothing moved) if the parameters do not share one dtype
    and device."""
    ps = [p for _, group in layers for p in group]
    if not ps or len({(p.dtype, p.device) for p in ps}) != 1:
        return None
    n = sum(p.numel() for p in ps)
    values = torch.empty(n, dtype=ps[0].dtype, device=ps[0].device)
    grads = torch.zeros_like(values)
    spans, at = [], 0
    with torch.no_grad():
        for _, group in layers:
            start = at
            for p in group:
                k = p.numel()
                values[at:at + k].copy_(p.detach().reshape(-1))
                if p.grad is not None:
                    grads[at:at + k].copy_(p.grad.reshape(-1))
                p.data = values[at:at + k].view_as(p)
                p.grad = grads[at:at + k].view_as(p)
                at += k
            spans.append((start, at))
    return grads, spans


def is_view(p: torch.Tensor, buf: torch.Tensor) -> bool:
    """``p`` (a parameter's data or gradient) still lives in ``buf``."""
    return p.untyped_storage().data_ptr() == buf.untyped_storage().data_ptr()
