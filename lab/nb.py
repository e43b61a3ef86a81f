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

from . import claims
from .claims import VERDICTS  # noqa: F401  (re-exported: tools/claims_page.py)
from .claim_text import _digits, _show, _thresholds, claim_text, evidence_text, test_text  # noqa: F401
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


CLAIM_KEY = "lab_claim"  # where a claim record sits in its output's metadata


DATA = ("rounds", "gaps", "estimate", "se", "value", "parts")


def registry_path():
    """``$LAB_CLAIMS``, else the nearest ``book/claims.toml`` above the working folder (a
    notebook runs in its own folder)."""
    import pathlib
    if os.environ.get("LAB_CLAIMS"):
        return pathlib.Path(os.environ["LAB_CLAIMS"])
    here = pathlib.Path.cwd().resolve()
    for d in (here, *here.parents):
        if (d / "book" / "claims.toml").is_file():
            return d / "book" / "claims.toml"
    raise FileNotFoundError("no book/claims.toml above the working folder (set LAB_CLAIMS)")


def claim(key: str, *, check: bool = True, **declared) -> None:
    """Record one paper claim tested by this chapter, judged by its rule in the registry
    (``book/claims.toml``, :mod:`lab.rules`), and display it; returns nothing.

    The runs' numbers go in as the rule's kind wants them: ``rounds`` (ratio: one
    baseline-over-method ratio per interleaved round), ``gaps`` (parity: one gap per seed),
    ``estimate`` and ``se`` (bound), ``value`` (deterministic), or ``parts={name: {...}}`` for a
    composite claim. With them: ``measured`` (in words, built from the run's numbers), the
    evidence (``substrate``, ``runs``, ``seeds``, ``steps``; ``bytes`` for byte claims;
    ``evidence``, what :func:`lab.claims.evidence` read from the runs) and ``why``, the
    chapter's reading of the outcome. The statement, source and quantity are the registry's.

    A claim not yet migrated to its registered rule still declares ``holds``/``in_part`` and
    ``paper``/``claimed``/``quantity`` (:func:`lab.claims.record`). ``check``: a mechanism the
    chapter relies on (an ``AssertionError`` naming the claim if false), never the verdict.

    The record is displayed as markdown, itself in the output's metadata (under ``CLAIM_KEY``)
    for ``tools/claims_page.py``, so the scorecard is built from the stored outputs. A verdict is
    never typed: there is no ``verdict=``.
    """
    if "verdict" in declared:
        raise TypeError(f"claim {key!r}: verdict= is not an argument: the verdict is computed "
                        f"from the runs by the claim's registered rule")
    if "holds" in declared:
        rec = claims.record(key, **declared)
    else:
        from . import rules
        reg = rules.registry(registry_path())
        if key not in reg:
            raise KeyError(f"claim {key!r} is not registered in {registry_path()}")
        entry = reg[key]
        data = {k: declared.pop(k) for k in DATA if k in declared}
        data = data.get("parts", data)
        rec = claims.registered(key, entry, rules.judge(key, entry, data), **declared)
    claims.log(rec)   # CI's re-execution compares it with the stored verdict (book/conftest.py)
    if not bool(check):
        raise AssertionError(f"claim {key!r}: the run does not support it "
                             f"(measured: {rec['measured']})")
    from IPython.display import display
    display({"text/markdown": claim_text(rec)}, metadata={CLAIM_KEY: rec}, raw=True)


def stored_claims(path) -> list[dict]:
    """The claim records a notebook file holds in its stored outputs, in cell order (the
    scorecard, CI's re-judging and the stress tool all read them here)."""
    import json
    import pathlib
    nb = json.loads(pathlib.Path(path).read_text(encoding="utf8"))
    return [out["metadata"][CLAIM_KEY] for cell in nb["cells"] if cell["cell_type"] == "code"
            for out in cell.get("outputs", []) if CLAIM_KEY in out.get("metadata", {})]


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


MAIN_DOC = """re-execute notebooks in place, top to bottom in a fresh kernel each, as the book
stores them (outputs included):

    python -m lab.nb book/01_foundations/02_collectives.ipynb
    LAB_PROFILE=gpu python -m lab.nb book/07_p3/*.ipynb

A notebook whose cell raises is left as it was (not written); the next one runs. Exit status:
0 every notebook ran; 1 one failed; 2 a bad argument (a path that is not a notebook);
130 interrupted (Ctrl-C)."""


def main(argv=None) -> int:
    """``python -m lab.nb NOTEBOOK ...``: :func:`execute` each, one line per notebook (its
    seconds, or the cell that failed and why); the exit status of :data:`MAIN_DOC`."""
    import argparse
    import pathlib
    import sys
    ap = argparse.ArgumentParser(prog="python -m lab.nb", description=MAIN_DOC,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("notebooks", nargs="+", metavar="NOTEBOOK", help="a .ipynb file")
    ap.add_argument("--timeout", type=int, default=300,
                    help="seconds a cell may run before it counts as hung (default: 300)")
    a = ap.parse_args(argv)
    bad = [f for f in a.notebooks if not (pathlib.Path(f).is_file() and f.endswith(".ipynb"))]
    if bad:
        ap.error(f"not a notebook file: {', '.join(bad)}")
    failed = 0
    try:
        for f in a.notebooks:
            try:
                print(f"{f}: {execute(f, a.timeout):.1f} s", flush=True)
            except Exception as e:  # noqa: BLE001  (one line per notebook, then the next)
                failed += 1
                print(f"{f}: failed, not written: {_cell_error(e)}", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        print("\ninterrupted (Ctrl-C)", file=sys.stderr)
        return 130
    return 1 if failed else 0


def _cell_error(e: BaseException) -> str:
    """One line for a notebook that failed: nbclient's cell error gives the exception's name
    and value (its last line), anything else its type and first line."""
    import re
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip().splitlines()   # no terminal colours
    if type(e).__name__ == "CellExecutionError":   # ... the traceback, then "Name: value"
        last = next((line for line in reversed(text) if line.strip()), "")
        return f"a cell raised {last.strip()}"
    return f"{type(e).__name__}: {text[0] if text else ''}"


if __name__ == "__main__":  # python -m lab.nb book/01_foundations/*.ipynb
    import sys
    sys.exit(main())
