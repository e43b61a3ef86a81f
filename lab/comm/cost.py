"""Alpha-beta cost models of collectives (Thakur, Rabenseifner, Gropp, IJHPCA 2005).

A message of ``n`` bytes costs ``alpha + n * beta`` (latency in seconds, seconds per byte).
``p`` ranks. Every formula returns seconds; the book's simulated clocks all come from here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def _check(n: float, p: int) -> None:
    if n < 0:
        raise ValueError(f"nbytes must be >= 0, got {n}")
    if p < 1:
        raise ValueError(f"p (world size) must be >= 1, got {p}")


def send(n: float, alpha: float, beta: float) -> float:
    """Point-to-point message."""
    _check(n, 1)
    return alpha + n * beta


def allreduce_ring(n: float, p: int, alpha: float, beta: float) -> float:
    """Ring allreduce (reduce-scatter + allgather): ``2(p-1) a + 2(p-1)/p n b``."""
    _check(n, p)
    return 0.0 if p == 1 else 2 * (p - 1) * alpha + 2 * (p - 1) / p * n * beta


def allreduce_tree(n: float, p: int, alpha: float, beta: float) -> float:
    """Recursive doubling: ``ceil(log2 p) (a + n b)``; wins for small messages."""
    _check(n, p)
    return math.ceil(math.log2(p)) * (alpha + n * beta)


def allgather_ring(m: float, p: int, alpha: float, beta: float) -> float:
    """Ring allgather of ``m`` bytes per rank: ``(p-1) a + (p-1) m b``."""
    _check(m, p)
    return (p - 1) * (alpha + m * beta)


def allgather_recursive_doubling(m: float, p: int, alpha: float, beta: float) -> float:
    """Recursive-doubling allgather of ``m`` bytes per rank: ``ceil(log2 p) a + (p-1) m b``
    (Thakur et al. 2005, Sec. 4.1; exact for p a power of two)."""
    _check(m, p)
    return math.ceil(math.log2(p)) * alpha + (p - 1) * m * beta


def allreduce_reduce_broadcast(n: float, p: int, alpha: float, beta: float) -> float:
    """Binomial-tree reduce then binomial-tree broadcast: ``2 ceil(log2 p) (a + n b)``."""
    _check(n, p)
    return 2 * math.ceil(math.log2(p)) * (alpha + n * beta)


def reduce_scatter_ring(n: float, p: int, alpha: float, beta: float) -> float:
    """Ring reduce-scatter of ``n`` bytes: ``(p-1) a + (p-1)/p n b``."""
    _check(n, p)
    return (p - 1) * alpha + (p - 1) / p * n * beta


def alltoall_pairwise(n: float, p: int, alpha: float, beta: float) -> float:
    """Pairwise all-to-all, ``n`` bytes handed in total (``n/p`` to each peer):
    ``(p-1) a + (p-1)/p n b``."""
    _check(n, p)
    return (p - 1) * alpha + (p - 1) / p * n * beta


def broadcast_tree(n: float, p: int, alpha: float, beta: float) -> float:
    """Binomial-tree broadcast: ``ceil(log2 p) (a + n b)``."""
    _check(n, p)
    return math.ceil(math.log2(p)) * (alpha + n * beta)


def ps_push_pull(n: float, p: int, alpha: float, beta: float, servers: int = 1,
                 colocated: bool = False) -> float:
    """Parameter server: p workers push ``n`` bytes of gradient and pull ``n`` of parameters.

    The model is sharded over ``servers``; each server link carries ``p n / servers`` bytes
    each way (Li et al., OSDI 2014). With servers colocated on the workers, a worker's own
    shard never crosses the network, so only ``(p-1)`` workers' traffic counts.
    """
    _check(n, p)
    if servers < 1:
        raise ValueError(f"servers must be >= 1, got {servers}")
    senders = p - 1 if colocated else p
    return 2 * (alpha + senders * n / servers * beta)


def allreduce(n: float, p: int, alpha: float, beta: float, algorithm: str = "ring") -> float:
    """Allreduce of ``n`` bytes by ``algorithm``: :func:`allreduce_ring` or
    :func:`allreduce_tree`."""
    if algorithm not in ("ring", "tree"):
        raise ValueError(f"algorithm must be 'ring' or 'tree', got {algorithm!r}")
    return (allreduce_ring if algorithm == "ring" else allreduce_tree)(n, p, alpha, beta)


def op_time(op: str, n: float, p: int, alpha: float, beta: float, algorithm: str = "ring") -> float:
    """Modeled time of a ``lab.comm`` operation on ``n`` bytes per rank."""
    if op == "allreduce":
        return allreduce(n, p, alpha, beta, algorithm)
    if op == "allgather":
        return allgather_ring(n, p, alpha, beta)
    if op == "reduce_scatter":
        return reduce_scatter_ring(n, p, alpha, beta)
    if op == "alltoall":
        return alltoall_pairwise(n, p, alpha, beta)
    if op == "broadcast":
        return broadcast_tree(n, p, alpha, beta)
    if op in ("send", "recv"):
        return send(n, alpha, beta)
    if op == "barrier":
        return allreduce_tree(0, p, alpha, beta)
    raise ValueError(f"no cost model for op {op!r}")


def wire_bytes(op: str, n: float, p: int, rank: int = 0, root: int = 0,
               backend: str = "gloo") -> tuple[int, int]:
    """(bytes sent, bytes received) on this rank's NIC by ``op`` on ``n`` bytes per rank, under
    the algorithm the backend runs, payload only (headers not counted). Checked against a
    kernel link's counters (tests/test_kernel_link.py): ring allreduce 2(p-1)/p n each way;
    ring allgather (p-1) n each way; broadcast over a binomial tree (the root sends
    ceil(log2 p) times n, an inner rank once, every other rank receives n); a reduce-scatter
    is gloo's allreduce of the whole input (NCCL's ring: (p-1)/p n each way). ``alltoall``,
    ``send``, ``recv`` and ``barrier`` are the caller's to book (their bytes are known there)."""
    if p <= 1:
        return 0, 0
    if op == "allreduce" or (op == "reduce_scatter" and backend == "gloo"):
        b = int(round(2 * (p - 1) * n / p))
        return b, b
    if op == "reduce_scatter":
        b = int(round((p - 1) * n / p))
        return b, b
    if op == "allgather":
        return int((p - 1) * n), int((p - 1) * n)
    if op == "broadcast":
        v = (rank - root) % p  # relative rank: in round k, v < 2^k sends to v + 2^k
        sends = sum(1 for k in range(max(1, math.ceil(math.log2(p)))) if v < 2 ** k and v + 2 ** k < p)
        return int(sends * n), 0 if v == 0 else int(n)
    raise ValueError(f"wire_bytes: no algorithm for op {op!r}")


# The features of each op in (alpha, beta) so a single least-squares fit covers a mixed sweep.
def _features(op: str, n: float, p: int, algorithm: str = "ring") -> tuple[float, float]:
    return op_time(op, n, p, 1.0, 0.0, algorithm), op_time(op, n, p, 0.0, 1.0, algorithm)


@dataclass(frozen=True)
class AlphaBeta:
    """A link as the alpha-beta model sees it: ``alpha`` seconds per message, ``beta`` seconds
    per byte. :meth:`time` prices a collective on it, :meth:`fit` measures one from samples."""

    alpha: float  # seconds per message
    beta: float   # seconds per byte

    @property
    def bandwidth(self) -> float:
        """Bytes per second."""
        return math.inf if self.beta == 0 else 1.0 / self.beta

    def time(self, op: str, n: float, p: int, algorithm: str = "ring") -> float:
        """Modeled seconds of ``op`` on ``n`` bytes over ``p`` ranks
        (:func:`~lab.comm.cost.op_time`)."""
        return op_time(op, n, p, self.alpha, self.beta, algorithm)

    @classmethod
    def fit(cls, samples, algorithm: str = "ring") -> "AlphaBeta":
        """Least squares over ``(op, nbytes, p, seconds)`` samples; alpha, beta >= 0.

        Relative errors are minimised (each row divided by its time), so the small messages
        that fix alpha weigh as much as the big ones that fix beta.
        """
        rows, ts = [], []
        for op, n, p, t in samples:
            rows.append(_features(op, n, p, algorithm))
            ts.append(t)
        A, t = np.asarray(rows, float), np.asarray(ts, float)
        if len(t) < 2:
            raise ValueError("fit needs at least two samples")
        from scipy.optimize import nnls
        w = 1.0 / np.maximum(t, 1e-9)
        (a, b), _ = nnls(A * w[:, None], t * w)  # non-negative least squares: a, b >= 0
        return cls(float(a), float(b))
