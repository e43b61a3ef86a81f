"""ATOMO: unbiased sparsification of an atomic decomposition under a budget.

Wang, Sievert, Charles, Liu, Wright, Papailiopoulos, "ATOMO: Communication-efficient Learning
via Atomic Sparsification", NeurIPS 2018. Write the gradient as a sum of atoms,
g = sum_i lambda_i a_i, keep atom i with probability p_i and rescale it by 1/p_i: unbiased.
The variance sum_i lambda_i^2 / p_i - |lambda|^2 is minimised under the budget sum_i p_i = s,
0 < p_i <= 1, by p_i = min(1, c |lambda_i|) with c chosen so the p's sum to s (their Eq. (4)
and Algorithm 2, "water filling": atoms whose p would exceed one are kept surely and the
budget is shared among the rest).

``atoms="svd"``: singular triples of the gradient viewed as a matrix (first dimension against
the rest; a 1-D tensor is laid out as a near-square matrix, zero padded: our choice, since the
training loop may hand over one flat vector). Payload: the kept u_i * sigma_i / p_i and v_i,
float32. ``atoms="coordinate"``: the entries themselves; the result is an unbiased
sparsifier of Part 5 (Wangni et al.'s optimal probabilities). Payload: values and int32 indices.
``budget`` is the expected number of atoms kept (``density`` instead: a fraction of the atoms).
"""
from __future__ import annotations

import math

import torch

from ..argspec import Arg, takes
from .base import Compressor, Part, WireFormat, register
from .packing import index_dtype


def keep_probabilities(weights: torch.Tensor, budget: float) -> torch.Tensor:
    """p_i = min(1, c w_i) with sum p = min(budget, #nonzero): ATOMO's Algorithm 2."""
    w = weights.abs().double()
    p = torch.zeros_like(w)
    nonzero = int((w > 0).sum())
    s = min(float(budget), nonzero)
    if s <= 0:
        return p.float()
    order = torch.argsort(w, descending=True)
    ws = w[order]
    tail = ws.flip(0).cumsum(0).flip(0)  # tail[j] = sum of ws[j:]
    # keep the largest j atoms surely and the rest at c w with c = (s - j) / tail[j]; the
    # smallest j whose scaled probabilities stay <= 1 is the solution (exists: j = ceil(s) - 1
    # at the latest, or every nonzero atom when the budget covers them all)
    js = torch.arange(min(int(math.ceil(s)), nonzero), dtype=torch.float64)
    if js.numel():
        c = (s - js) / tail[: js.numel()]
        ok = (c * ws[: js.numel()] <= 1 + 1e-12).nonzero()
        if ok.numel():
            j = int(ok[0])
            p[order[j:]] = (c[j] * ws[j:]).clamp(max=1)
            p[order[:j]] = 1.0
            return p.float()
    p[order[:nonzero]] = 1.0
    return p.float()


def matrix_shape(shape: torch.Size) -> tuple[int, int]:
    """The matrix an SVD runs on: (first dim, rest), or near-square for a vector."""
    if len(shape) >= 2:
        return shape[0], math.prod(shape[1:])
    n = math.prod(shape)
    rows = max(1, math.isqrt(n))
    return rows, -(-n // rows)


SVD_WIRE = WireFormat(Part("us", torch.float32, "rows * kept"),
                      Part("v", torch.float32, "cols * kept"), counts={"kept": "0..min(rows, cols)"},
                      where={"rows, cols": "the matrix the SVD runs on (first dimension, the rest; "
                                           "near-square for a vector)"})
COORDINATE_WIRE = WireFormat(Part("values", torch.float32, "c"),
                             Part("indices", "index", "c", "0..n - 1"), counts={"c": "0..n"})


@register("atomo")
@takes(atoms=Arg(str, choices=("svd", "coordinate"), help="singular triples or coordinates"),
       budget=Arg(float, gt=0, none=True, help="expected atoms kept"),
       density=Arg(float, gt=0, le=1, none=True, help="fraction of the atoms kept (wins over "
                                                      "budget)"),
       rule=lambda a: "give budget or density (budget=None needs a density)"
       if a["budget"] is None and a["density"] is None else None)
class Atomo(Compressor):
    """ATOMO over singular triples (``atoms="svd"``) or coordinates, under an expected
    ``budget`` of atoms (or a ``density`` of them)."""
    name = "atomo"

    def __init__(self, atoms: str = "svd", budget: float | None = 2, density: float | None = None,
                 seed: int = 0):
        if density is not None:
            budget = None
        self.atoms, self.budget, self.density = atoms, budget, density
        super().__init__(seed=seed)

    def compress(self, tensor, key=None):
        # the SVD needs the tensor's shape, which the base class flattens away
        self._shape = tensor.shape
        return super().compress(tensor, key)

    @property
    def wire(self):
        """The payload's format: singular factors (``us``, ``v``) or coordinates (``values``,
        ``indices``), by ``atoms``."""
        return SVD_WIRE if self.atoms == "svd" else COORDINATE_WIRE

    def wire_vars(self, numel, ctx, payload):
        rows, cols = ctx if self.atoms == "svd" and ctx is not None else (0, 0)
        return {"rows": rows, "cols": cols}

    def _budget(self, count: int) -> float:
        return self.density * count if self.density is not None else self.budget

    def encode(self, flat, key):
        if flat.numel() == 0:
            empty = flat.new_zeros(0, dtype=torch.float32)
            return ((empty, empty.to(dtype=torch.int32)) if self.atoms == "coordinate" else (empty, empty)), (0, 0)
        if self.atoms == "coordinate":
            p = keep_probabilities(flat, self._budget(flat.numel()))
            kept = torch.rand(p.shape, generator=self.generator).to(flat.device) < p.to(flat.device)
            idx = kept.nonzero().squeeze(1)
            return (flat[idx].float() / p[idx.cpu()].to(flat.device), idx.to(dtype=index_dtype(flat.numel()))), None
        n, m = matrix_shape(self._shape if self._shape.numel() == flat.numel() else flat.shape)
        mat = torch.cat([flat.float(), flat.new_zeros(n * m - flat.numel(), dtype=torch.float32)]).view(n, m)
        u, s, vh = torch.linalg.svd(mat, full_matrices=False)
        p = keep_probabilities(s.cpu(), self._budget(s.numel()))
        kept = (torch.rand(p.shape, generator=self.generator) < p).nonzero().squeeze(1)
        scale = (s.cpu()[kept] / p[kept]).to(flat.device)
        kept = kept.to(flat.device)
        return (u[:, kept] * scale, vh[kept].T.contiguous()), (n, m)

    def decode(self, payload, ctx, numel, dtype):
        if self.atoms == "coordinate":
            values, idx = payload
            out = torch.zeros(numel, dtype=dtype, device=values.device)
            out[idx.long()] = values.to(dtype=dtype)
            return out
        us, v = payload
        if numel == 0:
            return torch.zeros(0, dtype=dtype, device=us.device)
        n, m = ctx  # an allgathered payload arrives flat
        return (us.reshape(n, -1) @ v.reshape(m, -1).T).reshape(-1)[:numel].to(dtype=dtype)

    def __repr__(self):
        arg = f"density={self.density}" if self.density is not None else f"budget={self.budget}"
        return f"Atomo(atoms={self.atoms!r}, {arg})"
