"""Notebook helpers: the one profile switch, and showing library source in the book.

``LAB_PROFILE=ci`` (default) keeps every notebook near a minute on a 2-core CPU;
``LAB_PROFILE=gpu`` runs more workers, bigger models and more steps, with compute on the GPU
when one is visible (NCCL when every rank has its own). ``LAB_DEVICE=cpu`` (or ``cuda``) overrides
a profile's device: the gpu profile's sizes with compute on the CPU check its claims without a GPU.
"""
from __future__ import annotations

import inspect
import os
from dataclasses import dataclass, replace

from .runtime.context import DEVICES


@dataclass(frozen=True)
class Profile:
    name: str
    workers: int          # ranks for the main experiments
    step_scale: float     # multiplies every step count
    width_scale: int      # multiplies hidden sizes of the models
    repeats: int          # repeats of timed measurements
    device: str           # "cpu" or "auto" (a GPU when one is visible)

    def steps(self, n: int) -> int:
        return max(1, int(round(n * self.step_scale)))

    def width(self, n: int) -> int:
        return n * self.width_scale


PROFILES = {
    "ci": Profile("ci", workers=4, step_scale=1.0, width_scale=1, repeats=3, device="cpu"),
    "gpu": Profile("gpu", workers=8, step_scale=5.0, width_scale=4, repeats=10, device="auto"),
}


def profile(name: str | None = None) -> Profile:
    """The active profile: ``name``, else ``$LAB_PROFILE``, else ``"ci"``; its device replaced
    by ``$LAB_DEVICE`` when that is set."""
    name = name or os.environ.get("LAB_PROFILE", "ci")
    if name not in PROFILES:
        raise ValueError(f"LAB_PROFILE must be one of {sorted(PROFILES)}, got {name!r}")
    device = os.environ.get("LAB_DEVICE")
    if device is None:
        return PROFILES[name]
    if device not in DEVICES:
        raise ValueError(f"LAB_DEVICE must be 'auto', 'cpu' or 'cuda', got {device!r}")
    return replace(PROFILES[name], device=device)


def show_source(obj) -> None:
    """Display the source of a lab function or class, highlighted, in a notebook."""
    from IPython.display import Code, display
    display(Code(inspect.getsource(obj), language="python"))


VERDICTS = ("holds", "holds in part", "does not hold here")
CLAIM_KEY = "lab_claim"  # where a claim record sits in its output's metadata


def claim(key: str, *, paper: str, claimed: str, measured: str, verdict: str, check: bool,
          why: str = "") -> None:
    """Record one paper claim tested by this chapter, and assert the measured fact behind it.

    ``key`` names the claim (unique in the book); ``paper`` cites it (authors, year, figure or
    table); ``claimed`` is what the paper reports; ``measured`` what this run measured (a string
    built from the run's numbers, never typed in); ``verdict`` one of :data:`VERDICTS`; ``check``
    the measured fact that supports the verdict (an ``AssertionError`` naming the claim if it is
    false); ``why`` the reason when the verdict is not "holds".

    The record is displayed as part of the cell's output: markdown for the reader, the record
    itself in the output's metadata (under :data:`CLAIM_KEY`) for ``tools/claims_page.py``, so
    the scorecard page is built from the notebooks' stored outputs and cannot disagree with them.
    """
    if verdict not in VERDICTS:
        raise ValueError(f"verdict must be one of {VERDICTS}, got {verdict!r}")
    for name, value in (("key", key), ("paper", paper), ("claimed", claimed),
                        ("measured", measured)):
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{name} must be a non-empty string, got {value!r}")
    if verdict != "holds" and not why.strip():
        raise ValueError(f"why must say why claim {key!r} {verdict}")
    if not bool(check):
        raise AssertionError(f"claim {key!r}: the run does not support the verdict "
                             f"{verdict!r} (measured: {measured})")
    record = {"key": key, "paper": paper, "claimed": claimed, "measured": measured,
              "verdict": verdict, "why": why}
    from IPython.display import display
    text = (f"**Claim** ({paper}): {claimed}  \n**Measured:** {measured}  \n"
            f"**Verdict:** {verdict}" + (f" ({why})" if why else ""))
    display({"text/markdown": text}, metadata={CLAIM_KEY: record}, raw=True)


def run(nb, directory, timeout: int = 300, on_cell=None) -> None:
    """Execute the notebook ``nb`` (an nbformat node) top to bottom in a fresh kernel, with
    ``directory`` as its working folder; outputs land in ``nb``, also when a cell raises.
    ``on_cell(index)`` is called after each cell (to report progress)."""
    import nbclient
    hook = None if on_cell is None else (lambda cell, cell_index, execute_reply: on_cell(cell_index))
    nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3", on_cell_executed=hook,
                            resources={"metadata": {"path": str(directory)}}).execute()


def execute(path, timeout: int = 300) -> float:
    """Run a notebook top to bottom in place (as the book stores it); returns seconds."""
    import pathlib
    import time

    import nbformat
    p = pathlib.Path(path)
    nb = nbformat.read(p, as_version=4)
    t0 = time.perf_counter()
    run(nb, p.parent, timeout)
    nbformat.write(nb, p)
    return time.perf_counter() - t0


if __name__ == "__main__":  # python -m lab.nb book/01_foundations/*.ipynb
    import sys
    for f in sys.argv[1:]:
        print(f"{f}: {execute(f):.1f} s", flush=True)
