"""``History``: what a training run measured, per step, plus how to save and summarise it."""
from __future__ import annotations

import csv
import json
from dataclasses import asdict, dataclass, field, fields

import numpy as np

from ..textable import format_rows


@dataclass
class History:
    """What a run measured, per step: loss, bytes rank 0 handed over and received (and put on
    and took off its wire), compute, codec
    and communication seconds (measured, and modeled on the network), evaluations, and each
    scheme's own series (``series``); plus saving, loading and summarising."""

    config: dict
    world_size: int
    loss: list[float] = field(default_factory=list)      # training loss, mean over ranks
    bytes: list[int] = field(default_factory=list)       # bytes rank 0 handed to the network
    recv_bytes: list[int] = field(default_factory=list)  # bytes that reached rank 0 from peers
    # bytes rank 0's NIC sent and received under each collective's algorithm (a ring allreduce
    # sends 2(p-1)/p of what it is handed; lab.comm.cost.wire_bytes): what a link carries
    wire_sent: list[int] = field(default_factory=list)
    wire_recv: list[int] = field(default_factory=list)
    compute_s: list[float] = field(default_factory=list)  # forward + backward (measured)
    codec_s: list[float] = field(default_factory=list)   # compress/decompress (measured)
    comm_s: list[float] = field(default_factory=list)    # in collectives (measured, incl. emulation)
    modeled_comm_s: list[float] = field(default_factory=list)  # alpha-beta on the network
    eval_step: list[int] = field(default_factory=list)
    test_loss: list[float] = field(default_factory=list)
    test_acc: list[float] = field(default_factory=list)
    rank_bytes: list[int] = field(default_factory=list)  # total bytes per rank
    wall_s: float = 0.0
    # scheme-specific per-step series (collective chosen, staleness, exposed communication...):
    # name -> one value per step (or per event, as the scheme documents)
    series: dict = field(default_factory=dict)

    def record(self, info: dict) -> None:
        """Append one value to each named series."""
        for k, v in info.items():
            self.series.setdefault(k, []).append(v)

    # -- derived -------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The run's label: its config's ``label``, else ``name``, else its compressor."""
        c = self.config
        return c.get("label") or c.get("name") or c.get("compressor", "run")

    @property
    def steps(self) -> int:
        """How many steps the run completed (one loss each)."""
        return len(self.loss)

    @property
    def step_s(self) -> np.ndarray:
        """Measured seconds per step: compute + codec + communication."""
        return np.asarray(self.compute_s) + np.asarray(self.codec_s) + np.asarray(self.comm_s)

    @property
    def clock(self) -> np.ndarray:
        """Cumulative measured time at the end of each step."""
        return np.cumsum(self.step_s)

    @property
    def modeled_clock(self) -> np.ndarray:
        """Cumulative time if communication took exactly its alpha-beta time on the network
        (compute and codec as measured): free of this machine's loopback floor."""
        return np.cumsum(np.asarray(self.compute_s) + np.asarray(self.codec_s)
                         + np.asarray(self.modeled_comm_s))

    def time_to(self, target_acc: float, clock: str = "measured") -> float:
        """Seconds until held-out accuracy first reaches ``target_acc`` (inf if never), on the
        ``"measured"`` or the ``"modeled"`` clock."""
        if clock not in ("measured", "modeled"):
            raise ValueError(f"clock must be 'measured' or 'modeled', got {clock!r}")
        clock = self.clock if clock == "measured" else self.modeled_clock
        for s, a in zip(self.eval_step, self.test_acc):
            if a >= target_acc:
                return float(clock[min(s, len(clock)) - 1]) if s > 0 else 0.0
        return float("inf")

    @property
    def link(self) -> str:
        """How this run's network was made, read from its config: ``"none"`` (loopback, no
        network given), ``"modeled"`` (the emulated alpha-beta link) or ``"kernel"`` (shaped
        NICs in network namespaces)."""
        c = self.config
        if c.get("network") is None and c.get("network_schedule") is None:
            return "none"
        return "kernel" if c.get("link") == "kernel" else "modeled"

    def evidence(self, clock: str = "measured", bytes: str | None = None) -> dict:
        """How a number taken from this run was made: its ``link`` (:attr:`link`), the ``clock``
        it reads (``"measured"`` wall time, or ``"modeled"``: measured compute plus each
        exchange's alpha-beta time) and, for bytes, which (``"handed over"`` to a collective, or
        ``"on the wire"`` under its algorithm, only where the run recorded wire bytes)."""
        if clock not in ("measured", "modeled"):
            raise ValueError(f"clock must be 'measured' or 'modeled', got {clock!r}")
        if bytes not in (None, "handed over", "on the wire"):
            raise ValueError(f"bytes must be None, 'handed over' or 'on the wire', got {bytes!r}")
        if bytes == "on the wire" and not self.wire_sent:
            raise ValueError("bytes 'on the wire': this run recorded no wire bytes")
        return {"link": self.link, "clock": "wall" if clock == "measured" else "modeled",
                "bytes": bytes}

    @property
    def final_acc(self) -> float:
        """The last held-out accuracy measured; NaN if none was."""
        return self.test_acc[-1] if self.test_acc else float("nan")

    @property
    def bytes_per_step(self) -> float:
        """Mean bytes this rank handed to collectives per step (the ledger's), 0 if none."""
        return float(np.mean(self.bytes)) if self.bytes else 0.0

    def summary(self) -> dict:
        """The run in one row: loss, accuracy, bytes and the per-step time split (means),
        as ``python -m lab train`` prints it."""
        return {
            "run": self.name, "workers": self.world_size, "steps": self.steps,
            "final_loss": round(float(np.mean(self.loss[-5:])), 4) if self.loss else None,
            "test_acc": round(self.final_acc, 4),
            "bytes/step": int(self.bytes_per_step),
            "recv bytes/step": int(np.mean(self.recv_bytes)) if self.recv_bytes else 0,
            "compute ms/step": round(1e3 * float(np.mean(self.compute_s)), 2),
            "codec ms/step": round(1e3 * float(np.mean(self.codec_s)), 2),
            "comm ms/step": round(1e3 * float(np.mean(self.comm_s)), 2),
            "modeled comm ms/step": round(1e3 * float(np.mean(self.modeled_comm_s)), 2),
            # overlapping schedules: "comm" above is the exposed part; this is the hidden part
            **({"overlapped comm ms/step": round(1e3 * float(np.mean(self.series["overlapped_comm_s"])), 2)}
               if self.series.get("overlapped_comm_s") else {}),
        }

    # -- saving --------------------------------------------------------------------------
    def to_json(self, path) -> None:
        """Write as JSON; a config value JSON cannot hold (an object) is written as its repr
        rather than losing the run's results."""
        with open(path, "w") as f:
            json.dump(asdict(self), f, indent=1, default=repr)

    @classmethod
    def from_json(cls, path) -> "History":
        """A History read back from :meth:`to_json`'s file."""
        with open(path) as f:
            return cls(**json.load(f))

    def to_csv(self, path) -> None:
        """One row per step: ``step``, every per-step field under the name history.json gives
        it (loss, bytes, recv_bytes, wire_sent, wire_recv, compute_s, ...),
        then the held-out metrics on the steps where they were measured. A field this run did
        not record (an empty list) keeps its column, empty."""
        cols = _per_step(self)
        evals = dict(zip(self.eval_step, zip(self.test_loss, self.test_acc)))
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["step", *cols, "test_loss", "test_acc"])
            for i in range(self.steps):
                tl, ta = evals.get(i + 1, ("", ""))
                w.writerow([i + 1, *(_at(getattr(self, c), i) for c in cols), tl, ta])


#: the list fields of a History that are not one value per step
_NOT_PER_STEP = ("eval_step", "test_loss", "test_acc", "rank_bytes")


def _per_step(h: History) -> list[str]:
    """The names of ``h``'s fields that hold one value per step: its list fields other than
    the evaluations' and the per-rank totals, in the order they are declared. ``series`` is
    not among them: a scheme's series is per step or per event, as the scheme documents."""
    return [f.name for f in fields(h) if f.name not in _NOT_PER_STEP
            and isinstance(getattr(h, f.name), list)]


def _at(values: list, i: int):
    """``values[i]``, or "" (an empty CSV cell) where the series is shorter."""
    return values[i] if i < len(values) else ""


def table(histories) -> str:
    """A plain-text table of summaries (one row per run)."""
    return format_rows([h.summary() for h in histories])
