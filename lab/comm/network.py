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

from ..argspec import Arg
from .cost import AlphaBeta

#: SI prefixes of a rate (either case: "Mbps" and "mbps" are both megabits)
_PREFIX = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_TIMES = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
#: a number, then the rate's unit: an SI prefix, b (bits) or B (bytes), then "ps" or "/s"
_NUMBER = r"[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?"
_RATE = re.compile(rf"({_NUMBER})([kKmMgGtT]?)([bB])(?:ps|PS|Ps|/s)")
_LATENCY = re.compile(rf"({_NUMBER})(s|ms|us|µs|ns)?")
#: what a link may be: bits per second from 1 kb/s to 1 Pb/s, a latency up to a minute
BANDWIDTH_BITS = (1e3, 1e15)
LATENCY_S = (0.0, 60.0)
_BANDWIDTH = Arg(float, ge=BANDWIDTH_BITS[0] / 8, le=BANDWIDTH_BITS[1] / 8,
                 help="bytes per second")
_SECONDS = Arg(float, ge=LATENCY_S[0], le=LATENCY_S[1], help="seconds per message")
_EXAMPLES = "e.g. '1Gbps', '100Mbps,2ms', '1GB/s,10us'"


@dataclass(frozen=True)
class Network:
    """A link with ``latency`` (seconds per message) and ``bandwidth`` (bytes per second)."""

    latency: float
    bandwidth: float
    algorithm: str = "ring"  # how allreduce is modeled: "ring" or "tree"
    name: str = ""

    def __post_init__(self):
        _SECONDS.check(self.latency, "latency (seconds)", "Network")
        _BANDWIDTH.check(self.bandwidth, "bandwidth (bytes/s)", "Network")
        Arg(str, choices=("ring", "tree")).check(self.algorithm, "algorithm", "Network")
        Arg(str).check(self.name, "name", "Network")

    @property
    def cost(self) -> AlphaBeta:
        """The link as an alpha-beta model: ``alpha`` = latency, ``beta`` = seconds per byte."""
        return AlphaBeta(self.latency, 1.0 / self.bandwidth)

    def time(self, op: str, nbytes: float, p: int) -> float:
        """Modeled seconds of collective ``op`` moving ``nbytes`` among ``p`` ranks on this
        link (allreduce by the link's ``algorithm``); see :meth:`~lab.comm.AlphaBeta.time`."""
        return self.cost.time(op, nbytes, p, self.algorithm)

    @property
    def label(self) -> str:
        """A name for tables and plots: ``name`` if given, else rate and latency."""
        return self.name or f"{_fmt_bits(self.bandwidth * 8)}, {self.latency * 1e3:g} ms"

    @classmethod
    def parse(cls, spec: "str | Network | None") -> "Network | None":
        """A link from ``spec``: ``"1Gbps"``, ``"100Mbps,2ms"``, a preset name, a Network, or
        None/"none".

        The rate's unit says bits or bytes by its b: ``bps``/``b/s`` are bits, ``Bps``/``B/s``
        bytes (``"1GB/s"`` is 8 Gb/s, and the link's name says so), after an SI prefix of
        either case (k, M, G, T). The latency, after ``,`` (or ``@``), needs its unit (s, ms,
        us, ns); without one it is 0.5 ms. Bandwidths from 1 kb/s to 1 Pb/s and latencies up to
        60 s are accepted; anything else (a non-finite number included) is refused, naming
        the range."""
        if spec is None or isinstance(spec, Network):
            return spec
        if not isinstance(spec, str):
            raise ValueError(f"network must be a string like '1Gbps,0.5ms' (or a Network, or "
                             f"None), got {spec!r} ({type(spec).__name__})")
        s = spec.strip().replace(" ", "")
        if s.lower() in ("", "none", "loopback"):
            return None
        if s.lower() in PRESETS and "B" not in s:  # presets are in bits: "1GBps" is not one
            return PRESETS[s.lower()]
        rate, sep, latency = s, "", ""
        m = _RATE.match(s)
        if m:
            rate, rest = s[:m.end()], s[m.end():]
            if rest:
                sep, latency = rest[0], rest[1:]
        if not m or (rate != s and (sep not in ",@/" or not latency)):
            raise ValueError(f"network {spec!r} not understood: use {_EXAMPLES} (a rate in "
                             f"bps/b/s = bits or Bps/B/s = bytes, with k, M, G or T; then "
                             f"optionally ',' and a latency in s, ms, us or ns), or a preset "
                             f"({', '.join(PRESETS)})")
        value, prefix, unit = float(m.group(1)), m.group(2).lower(), m.group(3)
        bits = value * _PREFIX[prefix] * (8 if unit == "B" else 1)
        lo, hi = BANDWIDTH_BITS
        if not lo <= bits <= hi:  # also Inf and NaN
            raise ValueError(f"network {spec!r}: bandwidth {_fmt_bits(bits)} is out of range: "
                             f"a link is {_fmt_bits(lo)} to {_fmt_bits(hi)}")
        lat = 0.5e-3
        if latency:
            t = _LATENCY.fullmatch(latency)
            if not t:
                raise ValueError(f"network {spec!r} not understood: the latency {latency!r} "
                                 f"must be a number with a unit (s, ms, us or ns), {_EXAMPLES}")
            if t.group(2) is None:
                raise ValueError(f"network {spec!r}: the latency {latency!r} needs a unit "
                                 f"(s, ms, us or ns), e.g. '{rate},{latency}ms'")
            lat = float(t.group(1)) * _TIMES[t.group(2)]
            lo, hi = LATENCY_S
            if not lo <= lat <= hi:
                raise ValueError(f"network {spec!r}: latency {lat:g} s is out of range: a "
                                 f"link's latency is {lo:g} to {hi:g} s")
        name = spec if unit == "b" else f"{spec} ({_fmt_bits(bits)})"  # bytes: say the bits
        return cls(latency=lat, bandwidth=bits / 8, name=name)


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
    for unit, f in (("Pb/s", 1e15), ("Tb/s", 1e12), ("Gb/s", 1e9), ("Mb/s", 1e6), ("kb/s", 1e3)):
        if bits_per_s >= f and math.isfinite(bits_per_s):
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
        """The schedule written back as ``"LINK:STEPS LINK:STEPS"``, with each link's label."""
        return " ".join(f"{n.label}:{s}" for n, s in self.segments)

    @classmethod
    def parse(cls, spec) -> "NetworkSchedule | None":
        """A schedule from ``spec``: a string of ``LINK:STEPS`` segments, a list of
        ``(network, steps)``, a NetworkSchedule (returned as is), or ``None`` (no schedule: the
        run keeps one network)."""
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
