"""What every Byzantine-robust rule shares: all gradients on every rank, NaN filtering.

A robust rule needs every worker's whole gradient, so each rank allgathers the flat gradients
(n - 1 vectors arrive per rank: the ledger shows the cost of robustness against one
allreduce) and every rank computes the same rule, with no server to trust.

NaN filtering (our definition): a vector with any non-finite entry is certainly Byzantine. It
is removed before the rule runs and counts as one of the ``f`` tolerated Byzantine workers, so
a rule that tolerates f attackers sees n' = n - k vectors and f' = max(f - k, 0) (k removed).
If every vector is removed, or too few remain for the rule, it raises FloatingPointError.
"""
from __future__ import annotations

import torch

from ..argspec import Arg, takes
from .base import LAYERWISE, Aggregator

#: the number of Byzantine workers a rule tolerates
F = Arg(int, ge=0, help="Byzantine workers tolerated")


def whole(values: dict) -> str | None:
    """The rule of every robust aggregator: it acts on the whole gradient."""
    return "robust rules act on the whole gradient (layerwise=False)" \
        if values.get("layerwise") else None


def check_f(name: str, f) -> int:
    """``f`` (:data:`F`), the number of Byzantine workers a rule tolerates: an int >= 0."""
    return F.check(f, "f", name)


@takes(layerwise=LAYERWISE, rule=whole)
class RobustAggregator(Aggregator):
    """Allgather the flat gradients, drop non-finite rows, apply :meth:`rule`."""

    def __init__(self, comm, layerwise: bool = False):
        if layerwise:
            raise ValueError(f"{self.name}: robust rules act on the whole gradient "
                             f"(layerwise=False)")
        super().__init__(comm, None, False)
        self.dropped = 0

    @classmethod
    def check(cls, cfg, workers):
        """Before launch, what needs the world size (the names and values of
        ``aggregator_kw`` are checked when the config is made, from the declaration)."""

    def reduce(self, tensor, key, step):
        rows = self.comm.allgather(tensor.detach().reshape(1, -1), tag="grad", same_size=True)
        stacked = torch.cat(rows).to(tensor.device)
        finite = torch.isfinite(stacked).all(dim=1)
        self.dropped = int((~finite).sum())
        if not finite.any():
            raise FloatingPointError(f"step {step}: {self.name}: every gradient is non-finite")
        return self.rule(stacked[finite], self.dropped).to(tensor.dtype)

    def rule(self, vectors: torch.Tensor, dropped: int) -> torch.Tensor:
        """Combine the finite (n', d) ``vectors`` into one (d,) vector (to implement)."""
        raise NotImplementedError

    def info(self):
        return {"nonfinite_dropped": self.dropped}
