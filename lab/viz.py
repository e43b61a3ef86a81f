"""Plots in one style for the book and the CLI: labelled axes, units, one colour per run."""
from __future__ import annotations

import matplotlib

if not matplotlib.get_backend().lower().startswith(("module://", "nbagg", "ipympl")):
    matplotlib.use("Agg")  # headless: CI, the CLI, spawned ranks
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import FuncFormatter, NullFormatter  # noqa: E402

STYLE = {"figure.dpi": 110, "axes.grid": True, "grid.alpha": 0.3, "axes.spines.top": False,
         "axes.spines.right": False, "font.size": 10, "legend.frameon": False}
plt.rcParams.update(STYLE)


def _loss_axis(ax, values) -> None:
    """A log scale only where the values span more than a decade, and plain numbers on the ticks
    either way (matplotlib's log labels on a narrow range read "2.3x10^0")."""
    v = np.asarray([x for x in values if np.isfinite(x) and x > 0], dtype=float)
    if v.size and v.max() / v.min() > 10:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
    else:
        ax.ticklabel_format(axis="y", style="plain", useOffset=False)


def plot_history(histories, path=None, title: str = ""):
    """Training loss vs step; held-out accuracy vs measured time (for runs that never evaluate,
    such as pipeline runs, training loss vs measured time instead); bytes per step."""
    fig, ax = plt.subplots(1, 3, figsize=(13, 3.6))
    evaluated = any(h.test_acc for h in histories)
    for h in histories:
        steps = np.arange(1, h.steps + 1)
        clock = np.asarray(h.clock)
        timed = len(clock) == h.steps and h.steps > 0
        ax[0].plot(steps, h.loss, label=h.name)
        if evaluated:
            if h.test_acc:
                at = [float(clock[s - 1]) if timed and 0 < s <= h.steps else 0.0 for s in h.eval_step]
                ax[1].plot(at, h.test_acc, marker="o", ms=3, label=h.name)
        else:
            ax[1].plot(clock if timed else steps, h.loss, label=h.name)
        ax[2].bar(h.name, h.bytes_per_step / 1e3)
    losses = [x for h in histories for x in h.loss]
    ax[0].set(xlabel="step", ylabel="training loss", title="loss")
    _loss_axis(ax[0], losses)
    if evaluated:
        ax[1].set(xlabel="measured time (s)", ylabel="held-out accuracy", title="accuracy vs time")
    else:
        ax[1].set(xlabel="measured time (s)", ylabel="training loss",
                  title="loss vs time (no held-out evaluation)")
        _loss_axis(ax[1], losses)
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
