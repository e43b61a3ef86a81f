"""Validation on end-to-end runs the simulator never saw (issue 52, item 2).

:func:`draw` makes a seeded list of configurations (technique, model, ranks 2-8, a kernel link
100 Mb/s - 5 Gb/s) that is stored before any of them runs; :func:`measure_one` runs each as a short
real training (``lab.train`` on ``link="kernel"``: one network namespace per rank, its NIC
shaped by tbf); :func:`score` sets each measured step beside the prediction made from the
calibration alone (``lab.sim.calibrate``) and reports the relative error per family.
Four campaigns are stored: seed 52 scored by model 1; a fresh seed-53 draw by model 2 (chosen
on the seed-52 runs, so tested only on the fresh draw); and a third fresh draw (seed 54) by
model 3 (chosen on both earlier campaigns), with a repeated calibration and longer runs; and a
fourth draw (seed 55) by model 4 (chosen on the third campaign and a re-measurement of the
second), whose calibration adds an allgather's loopback floor per call.
The measured step is the mean over the steps after the first of a rank's compute, codec and
communication time (synchronous exchanges), or the run's wall time per step (an overlapping
schedule or the parameter server, whose communication hides in other steps).
"""
from __future__ import annotations

import math
import statistics
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2] / "book" / "12_at_scale"
DRAWN, MEASURED = ROOT / "validation_drawn.json", ROOT / "validation.json"
#: the second model's test: a fresh draw (seed 53), stored before any of it ran
FRESH_DRAWN, FRESH = ROOT / "validation_fresh_drawn.json", ROOT / "validation_fresh.json"
#: the third model's test: a third draw (seed 54), stored before any of it ran
THIRD_DRAWN, THIRD = ROOT / "validation_third_drawn.json", ROOT / "validation_third.json"
#: the fourth model's test: a fourth draw (seed 55), stored before any of it ran
FOURTH_DRAWN, FOURTH = ROOT / "validation_fourth_drawn.json", ROOT / "validation_fourth.json"
SEEDS = {DRAWN: 52, FRESH_DRAWN: 53, THIRD_DRAWN: 54, FOURTH_DRAWN: 55}
#: model 2: a synchronous step also pays the exchange's time off the wire (``exchange_s``: what
#: the History books as fp32's codec time), measured in the same loopback run as the floor;
#: model 1 left it out
MODEL_2 = {"model": 2}
#: model 3: model 2 with a full-duplex parameter server (pushes in while pulls go out), priced
#: with the profile's means over steps (the measured step is a mean) rather than medians; its
#: calibration each profile repeated in 6 rounds of 30-step runs, 3 before the measurements and
#: 3 after (the median over rounds, spread reported), its measured runs 30 steps long
MODEL_3 = {"model": 3, "repeats": 6, "steps": 30}
#: model 4: model 3 with an allgather's loopback floor measured per call (a signSGD reference
#: run in each calibration round, :func:`lab.sim.calibrate.allgather_floor`) in place of
#: ``p - 1`` of the allreduce's rounds; the same protocol
MODEL_4 = {"model": 4, "repeats": 6, "steps": 30}
#: every stored campaign, by the CLI flag that names it ('' for the first): (draw, measurements,
#: simulator model, a draw whose configurations its calibration also covers)
CAMPAIGNS = {"": (DRAWN, MEASURED, None, None), "fresh": (FRESH_DRAWN, FRESH, MODEL_2, DRAWN),
             "third": (THIRD_DRAWN, THIRD, MODEL_3, None),
             "fourth": (FOURTH_DRAWN, FOURTH, MODEL_4, None)}
FAMILIES = {"dense": ["fp32", "bf16"], "quantization": ["qsgd"], "sparsification": ["topk+ef"],
            "low rank": ["powersgd"], "local SGD": ["local-sgd"], "schedule": ["fifo", "p3"],
            "parameter server": ["async-ps"]}
SGD = {"lr": 0.05, "momentum": 0.9}
WALL = ("fifo", "p3", "async-ps")   # measured by wall time per step
PER_RANK = 8                        # samples per rank and step, in calibration and validation


def overrides(technique: str) -> dict:
    """The TrainConfig settings of ``technique`` (the advisor's methods where it has them)."""
    from ..advise.methods import METHODS
    extra = {"bf16": dict(compressor="bf16", **SGD), "fifo": dict(schedule="fifo", **SGD)}
    if technique in extra:
        return extra[technique]
    if technique not in METHODS:
        raise ValueError(f"technique {technique!r} has no validation run")
    return dict(METHODS[technique].overrides)


def draw(n: int = 36, seed: int = 52) -> list[dict]:
    """``n`` configurations, families in turn, the rest drawn with ``seed``."""
    rng = np.random.default_rng(seed)
    fams = list(FAMILIES)
    out = []
    for i in range(n):
        techs = FAMILIES[fams[i % len(fams)]]
        t = techs[int(rng.integers(len(techs)))]
        world = int(rng.integers(2, 9))
        mbps = float(np.exp(rng.uniform(math.log(100), math.log(5000))))
        model = ["mlp", "cnn"][int(rng.integers(2))]
        out.append({"id": i, "family": fams[i % len(fams)], "technique": t, "model": model,
                    "world": world, "link": f"{mbps:.0f}Mbps,0ms"})
    return out


def steps_for(technique: str, steps: int = 12) -> int:
    """``steps``, or for local SGD the first step and whole periods of 8 covering the rest."""
    return 1 + 8 * math.ceil((steps - 1) / 8) if technique == "local-sgd" else steps


def measure_one(c: dict, steps: int = 12) -> dict:
    """One drawn configuration trained for real on a kernel link: the measured step (s), and
    (to explain a miss, never to predict) the run's own compute per step."""
    from ..advise.methods import base_config
    from ..train import train
    cfg = base_config(c["model"], steps=steps_for(c["technique"], steps)).with_(
        network=c["link"], link="kernel", batch_size=PER_RANK * c["world"], **overrides(c["technique"]))
    h = train(cfg, c["world"])
    if c["technique"] in WALL:
        step = h.wall_s / h.steps
    else:
        step = statistics.mean(a + b + d for a, b, d in
                               zip(h.compute_s[1:], h.codec_s[1:], h.comm_s[1:]))
    return {**c, "measured_s": step, "wall_s": h.wall_s, "steps": h.steps, "link_kind": h.link,
            "bytes_per_step": statistics.mean(h.bytes[1:]),
            **{f"run_{k}_s": statistics.mean(getattr(h, f"{k}_s")[1:])
               for k in ("compute", "codec", "comm")}}


def predict_one(c: dict, calib: dict) -> float:
    """The simulator's step for drawn configuration ``c`` from calibration ``calib``."""
    from .network import Cluster
    from .step import Config, predict
    prof = calib["profiles"][f"{c['model']}:{c['world']}"]
    codec = calib["codecs"].get(f"{c['technique']}:{c['model']}:{c['world']}", [0.0, 0.0])
    model = calib.get("model", 1)
    at = "_mean_s" if model >= 3 else "_s"   # model 3 prices the profile's means
    cfg = Config(tuple(tuple(s) for s in prof["shapes"]), c["technique"],
                 Cluster.flat(c["world"], c["link"], kernel=True), prof["compute" + at],
                 codec[0], prof["floor_per_round" + at], cores=calib.get("cores", 2),
                 server_s_per_value=codec[1],
                 exchange_s=prof.get("exchange" + at, 0.0) if model >= 2 else 0.0,
                 server_duplex=model >= 3,
                 floor_call_s=(("allgather", prof["allgather_call" + at]),) if model >= 4 else ())
    return predict(cfg).step_s


def score(rows: list[dict], calib: dict) -> dict:
    """Per family: configurations, geomean and worst relative step-time error; and overall."""
    fams: dict = {}
    for r in rows:
        r["predicted_s"] = predict_one(r, calib)
        r["error"] = abs(r["predicted_s"] / r["measured_s"] - 1)
        fams.setdefault(r["family"], []).append(r["error"])
    geo = lambda e: float(math.exp(statistics.mean(math.log(max(x, 1e-4)) for x in e)))  # noqa: E731
    table = {f: {"configs": len(e), "geomean": geo(e), "worst": max(e)} for f, e in fams.items()}
    every = [r["error"] for r in rows]
    return {"families": table, "all": {"configs": len(every), "geomean": geo(every),
                                       "worst": max(every)}, "rows": rows}


def profile_round(rows: list[dict], runs: dict, steps: int = 12, progress=print,
                  allgather: bool = False) -> None:
    """One compute profile per (model, world) that ``rows`` need, appended to ``runs[key]``;
    ``allgather``: with its allgather floor per call (model 4)."""
    from . import calibrate
    for model, world in sorted({(r["model"], r["world"]) for r in rows}):
        progress(f"compute profile {model} at {world} ranks")
        prof = calibrate.compute_profile(model, world, steps=steps, per_rank=PER_RANK)
        if allgather:
            prof.update(calibrate.allgather_floor(model, world, steps=steps, per_rank=PER_RANK))
        runs.setdefault(f"{model}:{world}", []).append(prof)


def calibrate_for(rows: list[dict], progress=print, spec: dict | None = None,
                  runs: dict | None = None) -> dict:
    """The calibration every drawn configuration needs: a compute profile per (model, world),
    codec seconds per value per (technique, model, world); no run on a shaped link. ``spec``:
    which simulator model the calibration is for (:data:`MODEL_2`, :data:`MODEL_3`; None:
    model 1, whose predictions ignore ``exchange_s``). ``runs``: profiles already measured
    per key, combined by their medians (:func:`lab.sim.calibrate.combine`); otherwise one
    run each."""
    from . import calibrate
    calib = {"profiles": {}, "codecs": {}, "cores": __import__("os").cpu_count(), **(spec or {})}
    if runs:
        calib["profiles"] = {k: calibrate.combine(v) for k, v in sorted(runs.items())}
    else:
        one: dict = {}
        profile_round(rows, one, progress=progress,
                      allgather=(spec or {}).get("model", 1) >= 4)
        calib["profiles"] = {k: v[0] for k, v in sorted(one.items())}
    for t, model, world in sorted({(r["technique"], r["model"], r["world"]) for r in rows}):
        calib["codecs"][f"{t}:{model}:{world}"] = list(calibrate.codec_per_value(t, model, world))
    return calib


def provenance(command: str) -> dict:
    import datetime
    import os

    import torch

    from ..bench.table import machine
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {"command": command, "machine": machine(), "torch": torch.__version__,
            "date": datetime.date.today().isoformat(), "load": load}


def campaign(drawn: Path = DRAWN, out: Path = MEASURED, progress=print, spec: dict | None = None,
             also: Path | None = None, command: str = "python -m lab sim --remeasure") -> dict:
    """Calibrate (for simulator model ``spec``; the configurations of draw ``also`` too, so
    that it can be scored with the same calibration), then measure every drawn configuration;
    written to ``out`` as it goes. With ``spec["repeats"]``, the profiles are measured in that
    many rounds, half before the measurements and the rest after."""
    import json
    spec = spec or {}
    rows = json.loads(Path(drawn).read_text())["configs"]
    extra = json.loads(Path(also).read_text())["configs"] if also else []
    repeats, steps = spec.get("repeats", 1), spec.get("steps", 12)
    ag = spec.get("model", 1) >= 4
    runs: dict = {}
    before = (repeats + 1) // 2 if repeats > 1 else 0
    for _ in range(before):
        profile_round(rows + extra, runs, steps, progress, ag)
    calib = calibrate_for(rows + extra, progress, spec or None, runs or None)
    data = {"_meta": provenance(command), "calibration": calib, "rows": []}
    for c in rows:
        progress(f"measuring {c['id']}: {c['technique']} {c['model']} {c['world']} ranks {c['link']}")
        try:
            data["rows"].append(measure_one(c, steps))
        except Exception as err:   # a failed run is stored as such, never dropped silently
            data["rows"].append({**c, "failed": f"{type(err).__name__}: {err}"[:300]})
        Path(out).write_text(json.dumps(data, indent=1))
    if repeats > 1:   # the rounds after the measurements: the medians bracket them
        from .calibrate import combine
        for _ in range(repeats - before):
            profile_round(rows + extra, runs, steps, progress, ag)
        calib["profiles"] = {k: combine(v) for k, v in sorted(runs.items())}
        Path(out).write_text(json.dumps(data, indent=1))
    return data


def stored(path: Path = MEASURED, calibration: Path | None = None) -> dict:
    """The stored measurements scored: ``score`` of the rows that ran, with their provenance;
    ``calibration``: a stored campaign whose calibration (and simulator model) to score them
    with instead of their own."""
    import json
    data = json.loads(Path(path).read_text())
    calib = json.loads(Path(calibration).read_text())["calibration"] if calibration else \
        data["calibration"]
    ran = [dict(r) for r in data["rows"] if "measured_s" in r]
    out = score(ran, calib)
    out["failed"] = [r for r in data["rows"] if "failed" in r]
    out["_meta"] = data["_meta"]
    return out
