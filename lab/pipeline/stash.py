"""Weight stashing (PipeDream; Narayanan et al., SOSP 2019, Sec. 3.3): a stage keeps a copy of
the weights each in-flight micro-batch's forward pass used, and evaluates that micro-batch's
backward pass at the same copy. The gradient is then exact for the weights it is charged to,
though it is still applied ``tau_s`` updates late; memory grows by one weight copy per
micro-batch in flight (``p - s`` on stage ``s``).
"""
from __future__ import annotations

import torch
from torch import nn


class WeightStash:
    def __init__(self, module: nn.Module):
        self.module = module
        self.copies: dict[int, dict[str, torch.Tensor]] = {}

    def save(self, k: int) -> dict[str, torch.Tensor]:
        """A copy of the current weights for micro-batch ``k``'s forward pass to run on: leaves
        that will collect its backward pass's gradient, however the live weights move meanwhile."""
        self.copies[k] = {n: p.detach().clone().requires_grad_() for n, p in self.module.named_parameters()}
        return self.copies[k]

    def pop(self, k: int) -> dict[str, torch.Tensor]:
        """The weights of ``k``'s forward pass, released after its backward pass."""
        if k not in self.copies:
            raise KeyError(f"no stashed weights for micro-batch {k}")
        return self.copies.pop(k)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for c in self.copies.values() for t in c.values())
