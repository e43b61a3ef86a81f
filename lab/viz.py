"""Plots in one style for the book and the CLI: labelled axes, units, one colour per run."""
from __future__ import annotations

import matplotlib

if not matplotlib.get_backend().lower().startswith(("module://", "nbagg", "ipympl")):
    matplotlib.use("Agg")  # headless: CI, the CLI, spawned ranks
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {"figure.dpi": 110, "axes.grid": True, "grid.alpha": 0.3, "axes.spines.top": False,
         "axes.spines.right": False, "font.size": 10, "legend.frameon": False}
plt.rcParams.update(STYLE)


def plot_history(histories, path=None, title: str = ""):
    """Training loss vs step, held-out accuracy vs measured time, bytes per step."""
    fig, ax = plt.subplots(1, 3, figsize=(13, 3.6))
    for h in histories:
        ax[0].plot(range(1, h.steps + 1), h.loss, label=h.name)
        clock = h.clock
        ax[1].plot([clock[s - 1] for s in h.eval_step], h.test_acc, marker="o", ms=3, label=h.name)
        ax[2].bar(h.name, h.bytes_per_step / 1e3)
    ax[0].set(xlabel="step", ylabel="training loss", yscale="log", title="loss")
    ax[1].set(xlabel="measured time (s)", ylabel="held-out accuracy", title="accuracy vs time")
    ax[2].set(ylabel="kB sent per step per rank", title="traffic (from the ledger)")
    ax[2].tick_params(axis="x", rotation=30)
    ax[0].legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path)
        plt.close(fig)
    return fig
