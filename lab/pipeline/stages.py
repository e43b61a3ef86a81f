"""Cut a ``lab.models`` network into contiguous pipeline stages, without changing the model.

The model is built once with :func:`lab.models.make` (same seed, so the same weights as the
unsplit model), then listed as *units*, the smallest pieces a cut may fall between:

- ``gpt``: the embedding (tokens + positions), each transformer block, the final norm + head;
- ``mlp`` / ``linear``: each ``Linear`` with the activation that follows it.

Stages are contiguous runs of units balanced by parameter count. The units share their parameters with the built model, so a chain of all stages computes
exactly what the model computes (checked in ``tests/test_pipeline.py``).
"""
from __future__ import annotations

import torch
from torch import nn

from ..models import TinyGPT


class Embed(nn.Module):
    def __init__(self, gpt: TinyGPT):
        super().__init__()
        self.tok, self.pos = gpt.tok, gpt.pos

    def forward(self, idx):
        return self.tok(idx) + self.pos[: idx.shape[1]]


class Block(nn.Module):
    """One transformer layer with the model's causal mask (as ``nn.TransformerEncoder`` calls it)."""

    def __init__(self, layer: nn.Module, mask: torch.Tensor):
        super().__init__()
        self.layer = layer
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x):
        t = x.shape[1]
        return self.layer(x, src_mask=self.mask[:t, :t], is_causal=True)


def units(model: nn.Module) -> list[nn.Module]:
    """The pieces of ``model`` in order; their composition is ``model``."""
    if isinstance(model, TinyGPT):
        return [Embed(model), *[Block(layer, model.mask) for layer in model.blocks.layers],
                nn.Sequential(model.norm, model.head)]
    if isinstance(model, nn.Sequential) and any(isinstance(m, nn.Linear) for m in model):
        out, cur = [], []
        for m in model:
            if isinstance(m, nn.Linear) and any(isinstance(c, nn.Linear) for c in cur):
                out.append(nn.Sequential(*cur))
                cur = []
            cur.append(m)
        return out + [nn.Sequential(*cur)]
    raise ValueError(f"cannot split a {type(model).__name__} into pipeline stages "
                     "(supported: the gpt, mlp and linear models of lab.models)")


def partition(costs: list[float], stages: int) -> list[range]:
    """Contiguous ranges of unit indices, one per stage, that minimise the largest stage cost
    (the pipeline runs at the pace of its slowest stage); dynamic programming over cut points."""
    n = len(costs)
    if not (isinstance(stages, int) and 1 <= stages <= n):
        raise ValueError(f"stages must be in [1, {n}] for a model of {n} units, got {stages!r}")
    pre = [0.0]
    for c in costs:
        pre.append(pre[-1] + c)
    # best[j][i]: smallest max-cost of cutting the first i units into j stages; cut[j][i]: last cut
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(stages + 1)]
    cut = [[0] * (n + 1) for _ in range(stages + 1)]
    best[0][0] = 0.0
    for j in range(1, stages + 1):
        for i in range(j, n + 1):
            for k in range(j - 1, i):
                v = max(best[j - 1][k], pre[i] - pre[k])
                if v < best[j][i]:
                    best[j][i], cut[j][i] = v, k
    bounds, i = [], n
    for j in range(stages, 0, -1):
        bounds.append(range(cut[j][i], i))
        i = cut[j][i]
    return bounds[::-1]


def cost(unit: nn.Module) -> float:
    """A unit's cost for balancing: its parameter count (plus one, so empty units count)."""
    return 1.0 + sum(p.numel() for p in unit.parameters())


def split(model: nn.Module, stages: int) -> list[nn.Sequential]:
    """``stages`` contiguous pieces of ``model`` (each an ``nn.Sequential`` of units)."""
    us = units(model)
    return [nn.Sequential(*[us[i] for i in r]) for r in partition([cost(u) for u in us], stages)]
