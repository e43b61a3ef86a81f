"""The network a simulated cluster has: alpha, beta, one NIC per node, a faster link inside it.

Alpha-beta (Hockney 1994; Thakur, Rabenseifner, Gropp, IJHPCA 2005): a message of ``n`` bytes
costs ``alpha + n beta``. A node holds ``per_node`` ranks that share its NIC (``beta``) and talk
to each other over ``intra_beta`` (NVLink, PCIe, or memory); ``per_node=1`` is the flat cluster
of the book's kernel links. ``efficiency`` scales a collective's bandwidth by what a kernel link
delivered in ``bench links`` (:func:`kernel_efficiency`): on a tbf-shaped NIC gloo's allgather
reached 66% of the rate at 2 ranks, its allreduce 96%.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

LINKS = Path(__file__).resolve().parents[2] / "book" / "01_foundations" / "kernel_links.json"


@dataclass(frozen=True)
class Cluster:
    """``nodes`` x ``per_node`` ranks; ``bandwidth`` bytes/s per NIC, ``alpha`` s per message,
    ``intra_bandwidth`` bytes/s between ranks of a node (ignored when ``per_node == 1``),
    ``efficiency``: op -> fraction of the NIC rate a collective reaches (1.0 if absent)."""

    nodes: int
    bandwidth: float
    alpha: float = 0.0
    per_node: int = 1
    intra_bandwidth: float = math.inf
    efficiency: dict = field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.nodes, int) or self.nodes < 1:
            raise ValueError(f"nodes must be an int >= 1, got {self.nodes!r}")
        if not isinstance(self.per_node, int) or self.per_node < 1:
            raise ValueError(f"per_node must be an int >= 1, got {self.per_node!r}")
        for name in ("bandwidth", "intra_bandwidth"):
            v = getattr(self, name)
            if not (v > 0) or math.isnan(v):
                raise ValueError(f"{name} must be > 0 bytes/s, got {v!r}")
        if not (self.alpha >= 0) or math.isinf(self.alpha):
            raise ValueError(f"alpha must be a finite number >= 0 seconds, got {self.alpha!r}")

    @property
    def ranks(self) -> int:
        return self.nodes * self.per_node

    def beta(self, op: str = "allreduce") -> float:
        """Seconds per byte on a NIC for ``op``, the link's measured efficiency included."""
        return 1.0 / (self.bandwidth * self.efficiency.get(op, 1.0))

    @classmethod
    def flat(cls, ranks: int, link: str, alpha: float = 0.0, kernel: bool = False) -> "Cluster":
        """``ranks`` single-rank nodes on ``link`` ('1Gbps'); ``kernel``: the efficiencies of
        the book's kernel links at the nearest measured rank count."""
        from ..comm import Network
        eff = kernel_efficiency(ranks) if kernel else {}
        net = Network.parse(link)   # '1Gbps' or '1Gbps,0.1ms': the latency, if given, is alpha
        return cls(ranks, net.bandwidth, alpha or net.latency, 1, math.inf, eff)


def kernel_efficiency(ranks: int, path: Path = LINKS) -> dict:
    """``{op: fitted rate / shaped rate}`` from ``bench links``' fits at the measured rank count
    nearest ``ranks`` (log scale): the calibration of a kernel link, never a training run."""
    fits = json.loads(Path(path).read_text())["fits"]
    have = sorted({f["ranks"] for f in fits})
    near = min(have, key=lambda r: (abs(math.log(r / ranks)), r))
    return {f["op"]: f["fitted Mb/s"] / f["link Mb/s"] for f in fits if f["ranks"] == near}
