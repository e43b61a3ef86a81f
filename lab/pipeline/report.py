"""What a pipeline run measured, read off its History: bubble, throughput, per-axis bytes,
idle shares, how far one replica ran ahead of another, and a per-stage timeline figure."""
from __future__ import annotations

import numpy as np


def stage_tags(h) -> list[str]:
    return sorted(k.split("/", 1)[1] for k in h.series if k.startswith("compute/"))


def bubble(h, skip: int = 1) -> float:
    """Measured idle fraction: 1 - (compute summed over stages) / (stages x wall time), over
    the steps after the first ``skip`` (process warm-up); replicas averaged."""
    wall = float(np.sum(h.step_s[skip:]))
    busy = [float(np.sum(h.series[f"compute/{t}"][skip:])) for t in stage_tags(h)]
    return 1.0 - float(np.mean(busy)) / wall


def tokens_per_s(h, skip: int = 1) -> float:
    """Training throughput: tokens (or examples) of the global batch per second of wall."""
    c = h.config
    per_example = 1
    if c["data"] == "text":
        per_example = c.get("data_kw", {}).get("seq_len", 32)
    return c["batch_size"] * per_example * (h.steps - skip) / float(np.sum(h.step_s[skip:]))


def idle_share(h, tag: str, skip: int = 1) -> float:
    """Share of the wall clock (after ``skip`` steps) that the rank ``tag`` (e.g.
    ``"stage0/replica0"``) spent blocked waiting for a pipeline neighbour."""
    return float(np.sum(h.series[f"idle/{tag}"][skip:]) / np.sum(h.step_s[skip:]))


def replica_ends(h) -> dict[int, np.ndarray]:
    """Per replica: when it ended each step (its last stage to end it), in seconds from the
    start (every rank's clock starts at the same barrier)."""
    out: dict[int, list] = {}
    for key, ends in h.series.items():
        if key.startswith("ends/"):
            r = int(key.rsplit("replica", 1)[1]) if "replica" in key else 0
            out.setdefault(r, []).append(ends)
    return {r: np.max(v, axis=0) for r, v in out.items()}


def lead(h, fast: int = 0, slow: int = 1) -> int:
    """The most steps replica ``fast`` had ended beyond replica ``slow``, over every moment
    ``slow`` ended a step (non-blocking averaging with delay tau bounds it by tau)."""
    ends = replica_ends(h)
    ef, es = np.sort(ends[fast]), ends[slow]
    return max(int(np.searchsorted(ef, t, side="right")) - (j + 1) for j, t in enumerate(es))


def bytes_per_step(h) -> dict:
    """Bytes sent per step, summed over all ranks, along each axis (from the ledgers)."""
    return {"pipeline": float(np.mean(h.series["pp_bytes"])), "data": float(np.mean(h.series["dp_bytes"]))}


def plot_timeline(h, ax, t_from: float = 0.0, t_to: float | None = None, replica: int = 0):
    """One row per stage: forward (light) and backward (dark) boxes over measured time."""
    import matplotlib.pyplot as plt
    tags = [t for t in stage_tags(h) if "replica" not in t or t.endswith(f"replica{replica}")]
    colors = plt.get_cmap("tab10")
    m = h.config["microbatches"]
    for row, tag in enumerate(tags):
        for kind, k, t0, t1 in h.series[f"timeline/{tag}"]:
            if t1 < t_from or (t_to is not None and t0 > t_to):
                continue
            ax.barh(row, t1 - t0, left=t0, color=colors(k % m), alpha=0.45 if kind == "F" else 0.95,
                    edgecolor="black", linewidth=0.3)
            if t1 - t0 > 0.02 * ((t_to or t1) - t_from):
                ax.text((t0 + t1) / 2, row, f"{kind}{k}", ha="center", va="center", fontsize=6)
    ax.set_yticks(range(len(tags)), [t.split("/")[0] for t in tags])
    ax.invert_yaxis()
    ax.set(xlabel="time since start (s)", xlim=(t_from, t_to))
    return ax
