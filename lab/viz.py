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

# How big a figure may be. The book shows a figure in a text column 784 px wide (1,056 px where
# the page's right margin is free, book.css); a reader needs its text at 9 px or more, which
# tools/check_pages.py checks: text of s pt in a figure w px wide, shown at W px, is
# s * dpi / 72 * W / w px. At 110 dpi, 10 pt text (the style's) is 15.3 px and 9 pt, the
# smallest a notebook should ask for (a dense legend, a label beside a point), 13.75 px: a figure
# up to MAX_WIDTH_IN inches wide keeps both at 9 px or more in the 784 px column. Wider rows of
# panels go on two rows (plt.subplot_mosaic), not into a smaller font.
MIN_TEXT_PT = 9
MAX_WIDTH_IN = 10.5


def colors(names) -> dict:
    """One colour per name, the same in every panel of a figure (matplotlib's cycle, C0, C1...,
    in the order given): a method keeps its colour where a panel shows only some methods."""
    return {n: f"C{i % 10}" for i, n in enumerate(dict.fromkeys(names))}


def _renderer(fig):
    canvas = fig.canvas
    if hasattr(canvas, "get_renderer"):
        return canvas.get_renderer()
    return fig._get_renderer()  # noqa: SLF001 - canvases without get_renderer (mpl >= 3.6)


def label_points(ax, xs, ys, labels, *, fontsize=MIN_TEXT_PT, pad: float = 4.0, **kw) -> list:
    """Write ``labels`` beside the points ``(xs, ys)`` so that no two labels overlap, nor a
    label a point, nor the axes' edge, where a free place exists: each label takes the first of
    eight places around its point (right, above-right, below-right, left, ...; at ``pad`` points
    from it, then twice as far) that collides with nothing placed before; where every place
    collides, the one that overlaps least. Call it last, after the axes' scales and limits and
    the figure's layout (``tight_layout``) are set: they place the points. Returns the
    annotations."""
    fig = ax.figure
    renderer = _renderer(fig)
    pts = ax.transData.transform(np.column_stack([np.asarray(xs, float), np.asarray(ys, float)]))
    scale = fig.dpi / 72.0
    dot = 3.5 * scale                       # half the size of a marker, in pixels
    taken = [(x - dot, y - dot, x + dot, y + dot) for x, y in pts]  # the points' markers
    frame = ax.get_window_extent(renderer)
    places = [(1, 0.3, "left", "center"), (1, 1, "left", "bottom"), (1, -1, "left", "top"),
              (-1, 0.3, "right", "center"), (-1, 1, "right", "bottom"), (-1, -1, "right", "top"),
              (0, 1.4, "center", "bottom"), (0, -1.4, "center", "top")]

    def overlap(a, b):
        w = min(a[2], b[2]) - max(a[0], b[0])
        h = min(a[3], b[3]) - max(a[1], b[1])
        return w * h if w > 0 and h > 0 else 0.0

    out = []
    for (px, py), text in zip(zip(np.asarray(xs, float), np.asarray(ys, float)), labels):
        best = None
        for far in (1, 2):
            for dx, dy, ha, va in places:
                ann = ax.annotate(text, (px, py), xytext=(dx * pad * far, dy * pad * far),
                                  textcoords="offset points", ha=ha, va=va, fontsize=fontsize, **kw)
                bb = ann.get_window_extent(renderer)
                box = (bb.x0, bb.y0, bb.x1, bb.y1)
                outside = (max(0, frame.x0 - box[0]) + max(0, box[2] - frame.x1)
                           + max(0, frame.y0 - box[1]) + max(0, box[3] - frame.y1)) * bb.height
                cost = sum(overlap(box, t) for t in taken) + outside
                if best is None or cost < best[0]:
                    if best is not None:
                        best[1].remove()
                    best = (cost, ann, box)
                else:
                    ann.remove()
                if best[0] == 0:
                    break
            if best[0] == 0:
                break
        taken.append(best[2])
        out.append(best[1])
    return out


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
