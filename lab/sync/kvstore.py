"""``kvstore``: MXNet's default distributed KVStore, P3's baseline (Jayarajan et al., SysML 2019,
Section 5: "the baseline is MXNet's default parameter server"), on the same servers as
``p3-ps`` (:mod:`lab.sync.p3_server`), with the same workers, threads and links.

From the authors' code (``anandj91/p3``, branch ``baseline``, read for understanding):
``src/kvstore/kvstore_dist.h``, ``EncodeDefaultKey``: a layer of fewer than
``MXNET_KVSTORE_BIGARRAY_BOUND`` = 1,000,000 values goes whole to server ``key * 9973 mod S``;
a larger one is cut into ``S`` near-equal parts, part ``i`` to server ``i``. Each layer is pushed
as soon as backward produces it (MXNet's engine runs the push when the gradient is written),
and ps-lite's sender sends in the order it is handed messages: first in, first out. So it is
sharded, unsliced and layer-wise, and it overlaps backward already: the paper's speedups are
over this, and P3's own effect is p3-ps against it at the same number of servers.
"""
from __future__ import annotations

from ..argspec import Arg, takes
from ..schedule.plan import Unit
from .base import register
from .p3_server import _HASH, P3PS

BIGARRAY_BOUND = 1_000_000   # MXNET_KVSTORE_BIGARRAY_BOUND in MXNet's default KVStore


def kvstore_placement(sizes: list[int], servers: int, bound: int = BIGARRAY_BOUND
                      ) -> tuple[list[Unit], list[int]]:
    """MXNet's ``EncodeDefaultKey``: each layer whole on server ``layer * 9973 mod S``, or, from
    ``bound`` values on, in ``S`` near-equal parts, part ``i`` on server ``i``."""
    units, home = [], []
    for layer, n in enumerate(sizes):
        if n < bound:
            units.append(Unit(layer, 0, n))
            home.append(layer * _HASH % servers)
            continue
        for i in range(servers):
            a, b = round(n / servers * i), round(n / servers * (i + 1))
            units.append(Unit(layer, a, b))
            home.append(i)
    return units, home


@register("kvstore")
@takes(servers=Arg(int, ge=1, none=True, help="parameter-server ranks (default 1)"),
       bound=Arg(int, ge=1, help="values from which a layer is split over every server"),
       colocated=Arg(bool, help="every rank a worker and a server, sharing its link"))
class KVStore(P3PS):
    """MXNet's default KVStore: layers pushed whole (or split over every server from ``bound``
    values), first in first out, as backward produces them; pulled likewise."""

    name = "kvstore"

    def __init__(self, workers: int, servers: int | None = None, bound: int = BIGARRAY_BOUND,
                 colocated: bool = False):
        super().__init__(workers, servers, slice_size=None, priority=False, colocated=colocated)
        self.bound = bound

    def placement(self, sizes):
        return kvstore_placement(sizes, self.servers, self.bound)
