"""How a benchmark row's numbers were made: each row carries a ``"made"`` entry, so that a
claim built on stored rows reads its evidence from them (:func:`lab.claims.evidence`) instead
of a label typed in a notebook.

``made`` holds three things, as :meth:`lab.train.History.evidence` does for a training run:

- ``link``: ``"none"`` (loopback, nothing emulated), ``"modeled"`` (the emulated alpha-beta
  link of :class:`lab.comm.Network`) or ``"kernel"`` (shaped NICs in network namespaces,
  :mod:`lab.comm.kernel`);
- ``clock``: per time column, ``"wall"`` (measured wall time), ``"cpu"`` (this thread's CPU
  time) or ``"modeled"`` (an alpha-beta model's time, or measured compute plus modeled
  exchanges);
- ``bytes``: per byte column, ``"handed over"`` (to a collective, from the ledger),
  ``"on the wire"`` (under the collective's algorithm, from the ledger) or ``"nic"`` (the
  interface's own counters).
"""
from __future__ import annotations

LINKS = ("none", "modeled", "kernel")
CLOCKS = ("wall", "cpu", "modeled")
BYTES = ("handed over", "on the wire", "nic")


def made(link: str, clock: dict | None = None, bytes: dict | None = None) -> dict:
    """One row's ``made`` entry, checked: ``clock`` and ``bytes`` map column names to kinds."""
    if link not in LINKS:
        raise ValueError(f"link must be one of {LINKS}, got {link!r}")
    for name, kinds, allowed in (("clock", clock, CLOCKS), ("bytes", bytes, BYTES)):
        for col, kind in (kinds or {}).items():
            if kind not in allowed:
                raise ValueError(f"{name}[{col!r}] must be one of {allowed}, got {kind!r}")
    return {"link": link, "clock": dict(clock or {}), "bytes": dict(bytes or {})}


def link_of(network, kernel: bool = False) -> str:
    """The link kind of a run given its network (a spec such as ``"1Gbps,1ms"``, a
    :class:`lab.comm.Network`, or ``None``/``"none"`` for loopback); ``kernel``: the run
    sat on a kernel link shaped to that network."""
    if network is None or network == "none":
        return "none"
    return "kernel" if kernel else "modeled"


def stamp(rows: list[dict], link, clock: dict | None = None, bytes: dict | None = None) -> list[dict]:
    """``rows`` with their ``made`` entry (in place, and returned). ``link``: a kind, or a
    function of the row that gives it (rows of several links). Only the columns a row has are
    kept in its ``clock`` and ``bytes``."""
    for row in rows:
        kind = link(row) if callable(link) else link
        row["made"] = made(kind, {c: k for c, k in (clock or {}).items() if c in row},
                           {c: k for c, k in (bytes or {}).items() if c in row})
    return rows


def describe(m: dict) -> str:
    """A ``made`` entry in one line, for a table's title: ``link modeled; wall: ms; ...``."""
    parts = [f"link {m['link']}"]
    for name in ("clock", "bytes"):
        by_kind: dict[str, list[str]] = {}
        for col, kind in m.get(name, {}).items():
            by_kind.setdefault(kind, []).append(col)
        parts += [f"{kind}: {', '.join(cols)}" for kind, cols in by_kind.items()]
    return "; ".join(parts)
