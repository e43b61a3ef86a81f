"""Sketched SGD: count sketches summed by allreduce, heavy hitters, exact values in round two.

Ivkin, Rothchild, Ullah, Braverman, Stoica, Arora, "Communication-efficient Distributed SGD
with Sketching", NeurIPS 2019, Algorithm 1 (with the second round of Sec. 4). Each rank keeps a
momentum u and an error accumulator v:

    u <- rho u + g,   v <- v + u,   send S(v)                      (count sketch, allreduced)
    candidates = the c k coordinates with the largest estimates in sum_w S(v_w)
    round two: allreduce v_w[candidates] (exact values), keep the k largest -> update
    v[kept] <- 0,  u[kept] <- 0                                      (momentum stopping)

Our reading: the update is averaged (divided by the world size) and ``lr`` stays in the
optimizer (the paper scales g by lr before accumulating; equal for a constant rate). Both
rounds are allreduces: rows * width + c k numbers per rank whatever the world size.
"""
from __future__ import annotations

import torch

from ..argspec import SEED, Arg, takes
from ..compress.base import check_finite
from ..compress.countsketch import ROWS, WIDTH, sketch_for
from ..compress.topk import DENSITY, KEPT, resolve_k
from .base import FACTOR, LAYERWISE, Aggregator, register


@register("sketchsgd")
@takes(k=KEPT, density=DENSITY, rows=ROWS, width=WIDTH,
       candidates=Arg(int, ge=1, le=1000, help="heavy-hitter candidates per value kept"),
       momentum=FACTOR, seed=SEED, layerwise=LAYERWISE)
class SketchSGD(Aggregator):
    name = "sketchsgd"

    def __init__(self, comm, k: int | None = None, density: float = 0.01, rows: int = 5,
                 width: int = 4096, candidates: int = 2, momentum: float = 0.0, seed: int = 0,
                 layerwise: bool = False):
        super().__init__(comm, None, layerwise)
        self.k, self.density = k, density
        self.rows, self.width, self.candidates, self.seed = rows, width, candidates, seed
        self.momentum = float(momentum)
        self.u: dict = {}
        self.v: dict = {}
        self._sketches: dict = {}

    def _state(self, store, key, like):
        t = store.get(key)
        return t if t is not None and t.shape == like.shape else torch.zeros_like(like)

    def reduce(self, tensor, key, step):
        check_finite(tensor, self.name)
        g = tensor.detach().reshape(-1).float()
        n = g.numel()
        if n == 0:
            return tensor.detach().clone()
        u = self.momentum * self._state(self.u, key, g) + g
        v = self._state(self.v, key, g) + u
        k = resolve_k(n, self.density, self.k)
        cs = sketch_for(self._sketches, n, self.rows, self.width, self.seed, g.device)
        table = self.comm.allreduce(cs.sketch(v), tag="sketchsgd:sketch")
        est = cs.estimate(table)
        cand = torch.topk(est.abs(), min(n, self.candidates * k), sorted=False).indices
        exact = self.comm.allreduce(v[cand].clone(), tag="sketchsgd:values")
        top = torch.topk(exact.abs(), k, sorted=False).indices
        kept = cand[top]
        out = torch.zeros_like(g)
        out[kept] = exact[top] / self.comm.world_size
        v[kept] = 0
        u[kept] = 0
        self.u[key], self.v[key] = u, v
        return out.to(tensor.dtype).view(tensor.shape)
