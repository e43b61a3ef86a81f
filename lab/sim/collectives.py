"""Seconds of one collective on a :class:`~lab.sim.network.Cluster`.

Flat formulas are :mod:`lab.comm.cost`'s (Thakur, Rabenseifner, Gropp, IJHPCA 2005). With more
than one rank per node an allreduce is hierarchical: a reduce-scatter inside the node, an
allreduce across nodes of each rank's ``1/per_node`` shard (the node's ``per_node`` shards share
its NIC, one after another), an allgather inside the node. A parameter server with ``servers`` shards receives every worker's push
on its NIC: incast, ``workers * n / servers`` bytes in, as many out (Li et al., OSDI 2014).
"""
from __future__ import annotations

from ..comm import cost
from .network import Cluster


def allreduce(n: float, c: Cluster, algorithm: str = "ring") -> float:
    """Allreduce of ``n`` bytes over every rank of ``c``."""
    if c.per_node == 1:
        return cost.allreduce(n, c.nodes, c.alpha, c.beta("allreduce"), algorithm)
    intra = 1.0 / c.intra_bandwidth
    inside = cost.reduce_scatter_ring(n, c.per_node, 0.0, intra)
    across = cost.allreduce(n / c.per_node, c.nodes, c.alpha, c.beta("allreduce"),
                            algorithm) * c.per_node if c.nodes > 1 else 0.0
    return 2 * inside + across


def allgather(m: float, c: Cluster) -> float:
    """Allgather of ``m`` bytes from every rank (ring; a node's NIC carries its ranks' parts)."""
    p = c.ranks
    if c.per_node == 1:
        return cost.allgather_ring(m, p, c.alpha, c.beta("allgather"))
    inside = cost.allgather_ring(m, c.per_node, 0.0, 1.0 / c.intra_bandwidth)
    across = cost.allgather_ring(m * c.per_node, c.nodes, c.alpha, c.beta("allgather"))
    return inside + across + cost.allgather_ring(m * c.nodes, c.per_node, 0.0,
                                                 1.0 / c.intra_bandwidth) * (c.nodes > 1)


def parameter_server(n: float, c: Cluster, servers: int = 1, colocated: bool = False) -> float:
    """Push ``n`` bytes of gradient from every worker and pull ``n`` of parameters back."""
    return cost.ps_push_pull(n, c.ranks, c.alpha, c.beta("broadcast"), servers, colocated)


def op_seconds(op: str, n: float, c: Cluster, algorithm: str = "ring") -> float:
    """``op`` ('allreduce', 'allgather', 'broadcast'; on a flat cluster any op of
    :func:`lab.comm.cost.op_time`, 'send' and 'recv' included) on ``n`` bytes per rank."""
    if op == "allreduce":
        return allreduce(n, c, algorithm)
    if op == "allgather":
        return allgather(n, c)
    if op == "broadcast":
        return cost.broadcast_tree(n, c.ranks, c.alpha, c.beta("broadcast"))
    if c.per_node == 1:
        return cost.op_time(op, n, c.ranks, c.alpha, c.beta(op), algorithm)
    raise ValueError(f"op must be 'allreduce', 'allgather' or 'broadcast' on a cluster with "
                     f"more than one rank per node, got {op!r}")
