"""Emulated networks: make a collective on loopback take the time it would on a slower link.

On one machine loopback is fast (gloo: ~0.3 ms latency, ~0.7 GB/s on a 2-core box). Given a
``Network(latency, bandwidth)``, each ``lab.comm`` call runs for real and then sleeps until
its alpha-beta modeled time has passed, so asynchrony, staleness and overlap behave as on the
slow link, not as post-hoc arithmetic.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .cost import AlphaBeta

_UNITS = {"bps": 1, "kbps": 1e3, "mbps": 1e6, "gbps": 1e9, "tbps": 1e12}
_TIMES = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


@dataclass(frozen=True)
class Network:
    """A link with ``latency`` (seconds per message) and ``bandwidth`` (bytes per second)."""

    latency: float
    bandwidth: float
    algorithm: str = "ring"  # how allreduce is modeled: "ring" or "tree"
    name: str = ""

    def __post_init__(self):
        for arg in ("latency", "bandwidth"):
            v = getattr(self, arg)
            if not isinstance(v, (int, float)) or math.isnan(v):
                raise ValueError(f"{arg} must be a number, got {v!r}")
        if self.latency < 0:
            raise ValueError(f"latency must be >= 0 seconds, got {self.latency}")
        if self.bandwidth <= 0:
            raise ValueError(f"bandwidth must be > 0 bytes/s, got {self.bandwidth}")
        if self.algorithm not in ("ring", "tree"):
            raise ValueError(f"algorithm must be 'ring' or 'tree', got {self.algorithm!r}")

    @property
    def cost(self) -> AlphaBeta:
        return AlphaBeta(self.latency, 1.0 / self.bandwidth)

    def time(self, op: str, nbytes: float, p: int) -> float:
        return self.cost.time(op, nbytes, p, self.algorithm)

    @property
    def label(self) -> str:
        return self.name or f"{_fmt_bits(self.bandwidth * 8)}, {self.latency * 1e3:g} ms"

    @classmethod
    def parse(cls, spec: "str | Network | None") -> "Network | None":
        """``"1Gbps"``, ``"100Mbps,2ms"``, a preset name, a Network, or None/"none"."""
        if spec is None or isinstance(spec, Network):
            return spec
        if not isinstance(spec, str):
            raise ValueError(f"network must be a string like '1Gbps,0.5ms', got {spec!r}")
        s = spec.strip().lower().replace(" ", "")
        if s in ("", "none", "loopback"):
            return None
        if s in PRESETS:
            return PRESETS[s]
        m = re.fullmatch(r"([0-9.e+-]+)([kmgt]?bps)(?:[,@/]([0-9.e+-]+)(s|ms|us))?", s)
        if not m:
            raise ValueError(f"network {spec!r} not understood: use e.g. '1Gbps', '100Mbps,2ms' "
                             f"or a preset ({', '.join(PRESETS)})")
        bw = float(m.group(1)) * _UNITS[m.group(2)] / 8
        lat = float(m.group(3)) * _TIMES[m.group(4)] if m.group(3) else 0.5e-3
        return cls(latency=lat, bandwidth=bw, name=spec)


class LinkClock:
    """A virtual clock for one rank's emulated link, shared by the exchanges of a communication
    thread that does not sleep: the real bytes move through gloo/NCCL at once, and
    :meth:`book` says when the emulated link would have delivered them. A waiter sleeps only
    until then (no timer per call). The timing is the link model of
    :meth:`lab.comm.Collective.allreduce_async` and :func:`lab.schedule.plan.predict_step`:
    alone, a message ends its modeled time after it was issued, as a blocking call would; with
    fewer than ``in_flight`` before it still on the wire, its latency overlaps theirs and its
    bytes queue behind theirs; delivered no earlier than its real bytes arrived (a late real
    call delays its own delivery, not the emulated link's timeline).

    One real call may carry several messages of the emulated link (``pieces``: each a fraction
    of the call's bytes and the time it was ready to go): each is booked, and pays its latency,
    on its own, so the modeled time is the same as with one real call per message."""

    def __init__(self, in_flight: int = 1):
        if isinstance(in_flight, bool) or not isinstance(in_flight, int) or in_flight < 1:
            raise ValueError(f"in_flight must be a positive int, got {in_flight!r}")
        self.in_flight = in_flight
        self.issue = 0.0     # when the caller's data was ready to go (set by the caller)
        self.pieces: list[tuple[float, float]] | None = None  # (fraction, ready) per message
        self.free = 0.0      # when the link has carried every booked byte
        self.ends: list[float] = []
        self.spans: list[tuple[float, float]] = []  # the last call's messages: (start, end)

    def book(self, cost, nbytes: float, arrived: float) -> float:
        """Book a real call of ``nbytes`` whose bytes were all here at ``arrived``; ``cost(n)``
        is the modeled seconds of ``n`` bytes. Returns the modeled seconds of its messages."""
        total, self.spans = 0.0, []
        for frac, ready in self.pieces or [(1.0, self.issue)]:
            modeled, latency = cost(nbytes * frac), cost(0)
            window = self.ends[-self.in_flight] if len(self.ends) >= self.in_flight else 0.0
            start = max(ready, window)
            end = max(start + modeled, self.free + modeled - min(latency, modeled))
            self.free = end   # the emulated link's own timeline: real delays do not move it
            self.ends = self.ends[-self.in_flight:] + [end]
            self.spans.append((start, max(end, arrived)))
            total += modeled
        return total


def _fmt_bits(bits_per_s: float) -> str:
    for unit, f in (("Tb/s", 1e12), ("Gb/s", 1e9), ("Mb/s", 1e6), ("kb/s", 1e3)):
        if bits_per_s >= f:
            return f"{bits_per_s / f:g} {unit}"
    return f"{bits_per_s:g} b/s"


class NetworkSchedule:
    """A network that changes during training: ``"25Gbps,1ms:50 1Gbps,32ms:50"`` means 50 steps
    on the first link, then 50 on the second; after the last segment the last link stays.
    Segments may also be given in Python as ``[(network_spec, steps), ...]``."""

    def __init__(self, segments):
        self.segments: list[tuple[Network, int]] = []
        for spec, steps in segments:
            if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
                raise ValueError(f"network_schedule: steps per segment must be a positive int, "
                                 f"got {steps!r}")
            net = Network.parse(spec)
            if net is None:
                raise ValueError(f"network_schedule: segment {spec!r} names no network")
            self.segments.append((net, steps))
        if not self.segments:
            raise ValueError("network_schedule must have at least one segment")

    def at(self, step: int) -> Network:
        """The link in force at ``step`` (0-based)."""
        for net, steps in self.segments:
            if step < steps:
                return net
            step -= steps
        return self.segments[-1][0]

    @property
    def label(self) -> str:
        return " ".join(f"{n.label}:{s}" for n, s in self.segments)

    @classmethod
    def parse(cls, spec) -> "NetworkSchedule | None":
        if spec is None or isinstance(spec, NetworkSchedule):
            return spec
        if isinstance(spec, str):
            segs = []
            for part in spec.split():
                net, sep, steps = part.rpartition(":")
                if not sep or not steps.isdigit():
                    raise ValueError(f"network_schedule segment {part!r} not understood: use "
                                     f"'LINK:STEPS', e.g. '25Gbps,1ms:50 1Gbps,32ms:50'")
                segs.append((net, int(steps)))
            return cls(segs)
        if isinstance(spec, (list, tuple)):
            return cls(list(spec))
        raise ValueError(f"network_schedule must be a string or a list of (network, steps), "
                         f"got {spec!r}")


#: Named links used across the book: name -> :class:`Network` (latency in seconds, bandwidth in
#: bytes/s); ``Network.parse(name)`` and ``Collective(network=name)`` accept these names.
PRESETS = {
    "100mbps": Network(1e-3, 100e6 / 8, name="100 Mb/s, 1 ms"),
    "1gbps": Network(0.5e-3, 1e9 / 8, name="1 Gb/s, 0.5 ms"),
    "10gbps": Network(0.1e-3, 10e9 / 8, name="10 Gb/s, 0.1 ms"),
    "25gbps": Network(1e-3, 25e9 / 8, name="25 Gb/s, 1 ms"),
}
