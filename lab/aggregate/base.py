"""The aggregator contract: turn this rank's gradients into the update every rank applies.

An aggregator owns its communication (through a :class:`lab.comm.Collective`), which lets
multi-round schemes (PowerSGD, majority vote, Dist-EF-SGD with a server-side error, Krum) live
beside the simple "compress, exchange, decompress, average" path.
"""
from __future__ import annotations

import torch

from ..argspec import Arg, takes
from ..comm import Collective
from ..compress import Compressor
from ..registry import Registry

#: ``layerwise``: each tensor on its own (True) or one flat vector (False)
LAYERWISE = Arg(bool, help="aggregate tensor by tensor (True) or one flat vector (False)")
#: a momentum or moving-average factor
FACTOR = Arg(float, ge=0, lt=1, help="momentum factor")

#: Every aggregator by name: ``REGISTRY.names()``, ``REGISTRY.make(name, ...)``.
REGISTRY = Registry("aggregator")
register = REGISTRY.register


@takes(compressor=Arg(Compressor, none=True, help="the codec of a compressing aggregator"),
       layerwise=LAYERWISE)
class Aggregator:
    """``aggregate(grads, step) -> grads``: the estimate of the mean gradient over ranks.

    ``layerwise=False`` (default) flattens all tensors into one vector so a step costs one
    exchange; ``layerwise=True`` treats each tensor on its own (per-layer scales, per-layer
    state), which is what layer-wise methods such as TernGrad prescribe.
    """

    name = "base"
    uses_compressor = False  # True: takes a codec from the config (``compressor=``)

    def __init__(self, comm: Collective, compressor: Compressor | None = None,
                 layerwise: bool = False):
        if not isinstance(comm, Collective):
            raise TypeError(f"comm must be a lab.comm.Collective, got {type(comm).__name__}")
        self.comm, self.compressor, self.layerwise = comm, compressor, layerwise
        if compressor is not None:
            compressor.bind(comm.rank, comm.world_size)

    def local(self, grads: list[torch.Tensor], step: int) -> list[torch.Tensor]:
        """What this worker sends if honest, before an attack may replace it: by default its
        gradients; a scheme whose workers send something else (centered clipping's worker
        momentum) overrides it. The ``sync`` schedule calls it before the attack, then
        :meth:`aggregate` on what the attack returns."""
        return grads

    def aggregate(self, grads: list[torch.Tensor], step: int) -> list[torch.Tensor]:
        """The aggregated gradients, one tensor per input tensor: each tensor on its own
        (``layerwise``) or all flattened into one vector, through :meth:`reduce`."""
        if self.layerwise:
            return [self.reduce(g, key=i, step=step) for i, g in enumerate(grads)]
        flat = torch.cat([g.reshape(-1) for g in grads])
        out = self.reduce(flat, key="flat", step=step)
        return [o.view_as(g).to(g.dtype) for o, g in zip(out.split([g.numel() for g in grads]), grads)]

    def reduce(self, tensor: torch.Tensor, key, step: int) -> torch.Tensor:
        """Average one tensor over ranks (to implement)."""
        raise NotImplementedError

    def reduce_async(self, tensor: torch.Tensor, key, step: int,
                     out: torch.Tensor | None = None) -> torch.futures.Future:
        """Start averaging ``tensor``; a future of the average (written into ``out`` if given).

        Default: :meth:`reduce`, run now, as a completed future. Aggregators whose exchange is
        a single allreduce override it, so that several exchanges can be in flight together
        (the overlap engine's ``in_flight``, the DDP hook's buckets)."""
        avg = self.reduce(tensor, key, step)
        fut: torch.futures.Future = torch.futures.Future()
        fut.set_result(avg if out is None else out.copy_(avg.reshape(out.shape)))
        return fut

    def info(self) -> dict:
        """Per-step series for ``History.series`` (collective chosen, density...); called by the
        training loop once after each step. Default: nothing."""
        return {}


def make(name: str, comm: Collective, **kwargs) -> Aggregator:
    """Build the aggregator registered as ``name`` over ``comm``; ``kwargs`` are checked against
    its arguments (an unknown one raises a TypeError naming it)."""
    return REGISTRY.make(name, comm=comm, **kwargs)
