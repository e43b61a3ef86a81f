"""The grid's stored files: where they go, what produced them, and how a ``--merge`` joins them.

Every file records the command, the machine and the date that produced it
(:func:`provenance`; after a merge, ``_meta["merges"]`` lists the merging commands:
:func:`merged_meta`). A ``--merge`` reads the stored file of its part (:func:`_stored`, checked
against the command's settings) and replaces or joins the named methods' results
(:func:`merge_rows`). Files are written whole or not at all (:func:`_write`). Part of
``python -m lab bench grid`` (:mod:`lab.bench.grid`).
"""
from __future__ import annotations

import datetime
import json
from pathlib import Path

import torch

from .table import machine

ROOT = Path(__file__).resolve().parents[2]
CONVERGENCE = ROOT / "lab" / "advise" / "convergence.json"
TIMED = ROOT / "book" / "10_choosing" / "grid.json"
HELDOUT_OUT = ROOT / "book" / "10_choosing" / "heldout.json"
#: where the :data:`DRAWN` configurations' measurement is stored (``--out-heldout``)
DRAWN_OUT = ROOT / "book" / "10_choosing" / "heldout_drawn.json"
PROFILES_OUT = ROOT / "book" / "10_choosing" / "profiles.json"


def provenance(argv) -> dict:
    """What produced a file: the command, the machine, torch and the date."""
    return {"command": "python -m lab bench grid " + " ".join(argv), "machine": machine(),
            "torch": torch.__version__, "date": datetime.date.today().isoformat()}


def describe(meta: dict) -> str:
    """A stored file's provenance as a reader sees it: the command, machine, torch and date
    that produced it, then each ``--merge`` into it."""
    lines = [f"produced by: {meta['command']}",
             f"on {meta['machine']}, torch {meta['torch']}, {meta['date']}"]
    lines += [f"merged: {m['command']} (on {m['machine']}, {m['date']})"
              for m in meta.get("merges", [])]
    return "\n".join(lines)


def merged_meta(old: dict, meta: dict) -> dict:
    """The stored file's provenance with this merging command appended to its ``merges``."""
    return {**old, "merges": old.get("merges", []) + [meta]}


def merge_rows(old: list[dict], new: list[dict], methods, models) -> list[dict]:
    """``old`` rows with those of ``methods`` on ``models`` replaced by ``new`` (appended)."""
    return [r for r in old if not (r["method"] in methods and r["model"] in models)] + new


def _stored(a, ap, path: Path, steps: int, eval_every: int) -> dict:
    """The stored file a ``--merge`` goes into, checked against the command's settings."""
    if not a.methods:
        ap.error("--merge needs --methods: the methods to measure and merge")
    if not path.exists():
        ap.error(f"--merge: no stored file {path} to merge into")
    old = json.loads(path.read_text())
    if old.get("partial"):
        ap.error(f"--merge: {path} is a partial run")
    for flag, mine, theirs in (("--steps", a.steps, steps), ("--eval-every", a.eval_every,
                                                              eval_every)):
        if mine is not None and mine != theirs:
            ap.error(f"--merge: {flag} {mine} differs from {theirs} in {path}")
    return old


def _settings_of(path: Path, models=None) -> tuple:
    """(steps, eval_every) a stored file was measured with: the timed or held-out file's, or
    (``models``) the convergence file's for the first of them (None if absent)."""
    if not path.exists():
        return None, None
    data = json.loads(path.read_text())
    data = data.get(models[0], {}) if models else data
    return data.get("steps"), data.get("eval_every")


def _write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)
    print(f"wrote {path}")
