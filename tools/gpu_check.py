"""The GPU check: everything the book and ``lab`` claim about GPUs, measured in one call.

    python tools/gpu_check.py [--dry-run] [--out DIR] [--only SECTION ...] [--budget S]

A GPU machine is lent rarely and for about 15 minutes, start-up included, so this runs as one
prepared command in about six and a half minutes (``../shared/GPU.md`` says how to spend the lease). Its
sections run in this order, each in its own process group under its own time budget (time a
section leaves unused goes to the next), and every row is written as soon as it is measured to
``DIR/gpu_check.json`` and ``DIR/gpu_check.md`` (``DIR``: ``--out``, else ``$OUT``, else
``gpu_check_out``): a run cut off keeps what it measured.

1. ``machine``: GPU model, memory, driver, CUDA, NCCL, torch, Python, CPU cores, lab.
2. ``tests``: the tests marked ``gpu`` (``python -m pytest -m gpu``); on a GPU none may skip.
3. ``codecs``: every codec on CUDA at 1M, 16M and 64M values against a device-to-device copy
   (:func:`lab.bench.codecs.against_copy`: casts within 1.5x, quantizers within 5x, Top-k's
   compress no slower than ``torch.topk``).
4. ``sim``: each published model's layers profiled on the GPU (:mod:`lab.sim.device_profile`,
   batch 32), one step of all its layers against the profile's sum (the prediction), and the
   FLOP-rate model's step beside them; the profiles go to ``DIR/sim_profiles.json``, where
   :func:`lab.sim.models.scenario` can take their sums as ``compute_s``.
5. ``hooks``: lab's DDP hooks against PyTorch's fp16 and PowerSGD hooks with GPU compute
   (:mod:`lab.bench.hooks`): one rank on NCCL, 2 and 4 ranks over gloo with CUDA tensors.
6. ``p3``: ``bench p3``'s schedule table (sync, fifo, p3; VGG-like) on 4 and 8 CPU ranks, a
   core each (targets: p3/sync >= 1.30 at 4 ranks, >= 1.25 at 8), and 2 ranks computing on the GPU.
7. ``notebooks``: a few chapters under ``LAB_PROFILE=gpu``, side by side, each with a timeout:
   pass or fail, seconds; the executed notebooks go to ``DIR/notebooks.tar.gz``.

``--dry-run``: the same sections on the CPU with tiny sizes, in under a minute (the test suite
runs it, so the check cannot rot between GPU runs); its notebook is a small generated one.
On the GPU machine, with the wheels of ``tools/gpu_wheels.sh`` carried in ``.whl``::

    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
    PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 python3 tools/gpu_check.py
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import select
import signal
import subprocess
import sys
import tarfile
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: section -> (budget in seconds on the GPU, in the dry run)
#: (the dry run takes about 50 s on an idle 2-core machine; its budgets are generous, for a
#: loaded one: it checks that the check works, not how fast)
SECTIONS = {"machine": (15, 30), "tests": (50, 90), "codecs": (80, 40), "sim": (45, 40),
            "hooks": (45, 60), "p3": (80, 80), "notebooks": (75, 80)}
#: the sim section's models and the device rate the FLOP model is priced at (Part 12's input)
SIM_MODELS, SIM_TFLOPS = ("resnet50", "vgg19", "bert-base", "sockeye"), 200.0
NOTEBOOKS = ("book/01_foundations/04_data_parallel_sgd.ipynb",
             "book/04_quantization/01_stochastic_rounding.ipynb",
             "book/05_sparsification/01_topk_and_error_feedback.ipynb",
             "book/06_lowrank_sketch/01_powersgd.ipynb")
P3_TARGETS = {4: 1.30, 8: 1.25}  # p3/sync at the better link, CPU ranks a core each
ROW, INFO, CELL = "@@ROW ", "@@INFO ", "@@CELL "


# -- the sections (each runs in a child process and prints its rows as it goes) ---------------

def emit_row(row: dict) -> None:
    print(ROW + json.dumps(row, default=str), flush=True)


def emit_info(**info) -> None:
    print(INFO + json.dumps(info, default=str), flush=True)


def machine(dry: bool) -> None:
    import torch

    import lab
    from lab.compress import native
    info = {"python": platform.python_version(), "torch": torch.__version__,
            "cuda": torch.version.cuda, "cpu cores": os.cpu_count(), "lab": lab.__version__,
            "C kernels": native.library() is not None, "date": datetime.date.today().isoformat(),
            "cpu": platform.processor() or platform.machine()}
    try:
        info["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                        capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info.update({"gpu": p.name, "gpus": torch.cuda.device_count(),
                     "memory GiB": round(p.total_memory / 2 ** 30, 1),
                     "multiprocessors": p.multi_processor_count,
                     "nccl": ".".join(map(str, torch.cuda.nccl.version()))})
        try:
            smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=10).stdout.strip()
            info["driver"] = smi.splitlines()[0] if smi else None
        except (OSError, subprocess.SubprocessError):
            info["driver"] = None
        x = torch.empty(2 ** 28, device="cuda")
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            x.clone()
            torch.cuda.synchronize()
            best = min(best, time.perf_counter() - t0)
        info["copy GB/s (read + write)"] = round(2 * x.numel() * 4 / best / 1e9)
    else:
        info["gpu"] = None
    emit_info(**info)


def tests(dry: bool) -> None:
    import torch
    xml = pathlib.Path(tempfile.mkdtemp()) / "gpu-tests.xml"
    files = ["tests/test_gpu.py", "tests/test_fast_codecs.py"]
    t0 = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider",
                          f"--junitxml={xml}", *files], cwd=ROOT, capture_output=True, text=True)
    print(run.stdout[-4000:], run.stderr[-2000:], sep="\n")
    import xml.etree.ElementTree as ET
    cases = ET.parse(xml).getroot().iter("testcase") if xml.exists() else []
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for case in cases:
        kinds = {child.tag for child in case}
        kind = "failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed"
        counts[kind] += 1
        if kind == "failed":
            msg = next(c.get("message", "") for c in case if c.tag in ("failure", "error"))
            emit_row({"test": f"{case.get('classname')}::{case.get('name')}", "result": "failed",
                      "message": msg[:300]})
    gpu = torch.cuda.is_available()
    emit_row({"test": "all marked gpu", **counts, "seconds": round(time.perf_counter() - t0, 1),
              "pytest rc": run.returncode, "target": "none failed" + (", none skipped" if gpu else ""),
              "ok": counts["failed"] == 0 and run.returncode in (0, 5 if not gpu else 0)
              and (counts["skipped"] == 0 or not gpu) and sum(counts.values()) > 0})


def codecs(dry: bool) -> None:
    import torch

    from lab.bench.codecs import against_copy
    if torch.cuda.is_available() and not dry:
        sizes, device, repeats = (2 ** 20, 2 ** 24, 2 ** 26), "cuda", 3
    else:
        sizes, device, repeats = (4096, 2 ** 16), "cpu", 2
    for row in against_copy(sizes=sizes, device=device, repeats=repeats):
        if device == "cpu":  # the targets are a GPU's (a CPU copy is another yardstick)
            row = {k: v for k, v in row.items() if k not in ("target", "ok")}
        emit_row({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()})


def sim(dry: bool, out: pathlib.Path) -> None:
    import torch

    from lab.sim.device_profile import layer_profile, stack_step
    from lab.sim.models import compute_seconds
    gpu = torch.cuda.is_available() and not dry
    device, batch, scale, repeats = ("cuda", 32, 1.0, 5) if gpu else ("cpu", 1, 0.125, 1)
    emit_info(device=device, batch=batch, scale=scale,
              **({"gpu": torch.cuda.get_device_name(0)} if gpu else {}))
    profiles = {}
    for name in SIM_MODELS[:2] if dry else SIM_MODELS:
        prof = layer_profile(name, batch, device, scale, repeats)
        step = stack_step(name, batch, device, scale, max(1, repeats // 2))
        profiles[name] = prof
        (out / "sim_profiles.json").write_text(json.dumps(profiles, indent=1))
        emit_row({"model": name, "device": device, "batch": batch, "layers": len(prof["layers"]),
                  "profile ms": round(1e3 * prof["compute_s"], 3),
                  "step ms": round(1e3 * step, 3),
                  "step / profile": round(step / prof["compute_s"], 3),
                  "TFLOP/s": round(prof["tflops"], 3),
                  f"FLOP model ms ({SIM_TFLOPS:g} TFLOP/s)":
                      round(1e3 * compute_seconds(name, batch, SIM_TFLOPS * 1e12), 3)})


def hooks(dry: bool) -> None:
    import torch

    from lab.bench.hooks import run
    if torch.cuda.is_available() and not dry:
        plan = [(1, "nccl", "cuda", 4096, 20, 256), (2, "gloo", "cuda", 4096, 12, 256),
                (4, "gloo", "cuda", 4096, 8, 256)]
    else:
        plan = [(1, "gloo", "cpu", 32, 5, 16), (2, "gloo", "cpu", 32, 5, 16)]
    for world, backend, device, hidden, steps, batch in plan:
        for row in run(world, backend, device, hidden, steps, batch, timeout=120):
            if "x torch" in row and device == "cuda":
                same = 0.0 if world == 1 and "fp16" in row["hook"] else 1e-3
                row.update({"target": f"<= 1.05x torch, param diff <= {same:g}",
                            "ok": row["x torch"] <= 1.05 and row["param diff"] <= same})
            emit_row(row)


def p3(dry: bool) -> None:
    import torch

    from lab.bench.p3 import schedule_table
    gpu = torch.cuda.is_available() and not dry
    if gpu:
        plan = [(4, "cpu", ("1Gbps,0.1ms", "1.5Gbps,0.1ms"), 3), (8, "cpu", ("1Gbps,0.1ms", "1.5Gbps,0.1ms"), 3),
                (2, "cuda", ("1Gbps,0.1ms",), 3)]
    else:
        plan = [(2, "cpu", ("1Gbps,0.1ms",), 1)]
    for workers, device, links, rounds in plan:
        rows = schedule_table(("vgg",), links, ("sync", "fifo", "p3"), workers=(workers,),
                              rounds=rounds, device=device)
        ms = {(r["link"], r["schedule"]): r["ms/step"] for r in rows}
        for r in rows:
            keep = ("model", "ranks", "device", "batch", "link", "schedule", "ms/step",
                    "predicted ms", "speedup", "predicted speedup", "bound", "param diff")
            out = {k: r[k] for k in keep}
            if r["schedule"] == "p3":
                out["p3/fifo"] = round(ms[r["link"], "fifo"] / r["ms/step"], 3)
            emit_row(out)
        best = max(r["speedup"] for r in rows if r["schedule"] == "p3")
        target = P3_TARGETS.get(workers) if device == "cpu" and gpu else None
        emit_row({"model": "vgg", "ranks": workers, "device": device, "link": "best of " + ", ".join(links),
                  "schedule": "p3 (best p3/sync)", "speedup": best,
                  **({"target": f">= {target}", "ok": best >= target} if target else {})})


def _notebook(path: str, out_dir: str, timeout: int) -> None:
    """Run one notebook (a child of the ``notebooks`` section): executed copy into ``out_dir``,
    a result line on stdout."""
    import nbformat

    from lab import nb as labnb
    src = pathlib.Path(path)
    book = nbformat.read(src, as_version=4)
    t0 = time.perf_counter()
    result = {"notebook": path, "result": "passed"}

    def done(index):  # read back by the section if this notebook runs out of time
        print(f"{CELL}{index} {time.perf_counter() - t0:.1f}", flush=True)
    try:
        labnb.run(book, src.parent, timeout=timeout, on_cell=done)
    except Exception as err:  # noqa: BLE001 (the failing cell is what the row reports)
        bad = [i for i, c in enumerate(book.cells) if c.cell_type == "code"
               and any(o.get("output_type") == "error" for o in c.get("outputs", []))]
        result.update({"result": "failed", "cell": bad[0] if bad else None,
                       "error": f"{type(err).__name__}: {str(err).strip().splitlines()[-1][:300]}"})
    result["seconds"] = round(time.perf_counter() - t0, 1)
    nbformat.write(book, pathlib.Path(out_dir) / src.name)
    print(ROW + json.dumps(result), flush=True)


def _tiny_notebook(folder: pathlib.Path) -> str:
    """The dry run's notebook: the profile, a launch, an assert (the machinery, not a chapter)."""
    import nbformat
    cells = ["import os\nfrom lab.nb import profile\nP = profile()\nprint(P.name, P.device)",
             "from lab.runtime import launch\nranks = launch(lambda ctx: ctx.rank, 2, progress=False)",
             "assert ranks == [0, 1], ranks"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = folder / "dry_run.ipynb"
    nbformat.write(nb, path)
    return str(path)


def notebooks(dry: bool, budget: float, out: pathlib.Path, chosen=None) -> None:
    """Every notebook in its own process, all at once, each killed at the section's deadline
    (its row then says the last cell it finished and the one it was running)."""
    work = pathlib.Path(tempfile.mkdtemp())
    paths = [_tiny_notebook(work)] if dry else [str(ROOT / p) for p in chosen or NOTEBOOKS]
    env = {**os.environ, "LAB_PROFILE": "ci" if dry else "gpu"}
    deadline = time.monotonic() + budget - 5
    procs = {p: subprocess.Popen([sys.executable, __file__, "--notebook", p, str(work),
                                  str(int(budget))], env=env, stdout=subprocess.PIPE, text=True,
                                 start_new_session=True, cwd=ROOT) for p in paths}
    t0 = time.perf_counter()
    for p, proc in procs.items():
        try:
            stdout, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _kill(proc)
            stdout, _ = proc.communicate()  # what it printed before (the cells it finished)
        row = next((json.loads(line[len(ROW):]) for line in stdout.splitlines() if line.startswith(ROW)),
                   {"notebook": p, "result": "timed out",
                    "seconds": round(time.perf_counter() - t0, 1)})
        cells = [line[len(CELL):].split() for line in stdout.splitlines() if line.startswith(CELL)]
        if row["result"] == "timed out":
            import nbformat
            every = nbformat.read(p, as_version=4).cells
            last = int(cells[-1][0]) if cells else -1
            running = next((i for i in range(last + 1, len(every))
                            if every[i].cell_type == "code"), None)
            row.update({"cells done": f"{last + 1} of {len(every)}", "running": None if running
                        is None else f"cell {running}: " + every[running].source.strip()[:80]})
        row["notebook"] = os.path.relpath(row["notebook"], ROOT) if not dry else "dry_run.ipynb"
        row["profile"] = env["LAB_PROFILE"]
        row["ok"] = row["result"] == "passed"
        emit_row(row)
    with tarfile.open(out / "notebooks.tar.gz", "w:gz") as tar:
        for f in sorted(work.glob("*.ipynb")):
            tar.add(f, arcname=f.name)


# -- the parent: sections in turn, under budgets, the report rewritten after every row ------------

def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def markdown(report: dict) -> str:
    lines = [f"# GPU check{' (dry run)' if report['dry_run'] else ''}", "",
             f"Started {report['started']}; {report['seconds']:.0f} s so far.", ""]
    missed = [(name, r) for name, s in report["sections"].items() for r in s["rows"]
              if r.get("ok") is False]
    lines += [f"Targets: {sum(1 for s in report['sections'].values() for r in s['rows'] if 'ok' in r)}"
              f" checked, {len(missed)} missed.", ""]
    for name, s in report["sections"].items():
        lines += [f"## {name}: {s['status']} ({s['seconds']:.0f} of {s['budget_s']:.0f} s)", ""]
        if s["info"]:
            lines += [f"- {k}: {v}" for k, v in s["info"].items()] + [""]
        if s["rows"]:
            cols = list(dict.fromkeys(k for r in s["rows"] for k in r))
            lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
            for r in s["rows"]:
                cells = [r.get(c, "") for c in cols]
                lines.append("| " + " | ".join(f"{v:.4g}" if isinstance(v, float) else str(v)
                                               for v in cells) + " |")
            lines.append("")
    return "\n".join(lines) + "\n"


def write(report: dict, out: pathlib.Path, t0: float) -> None:
    report["seconds"] = time.perf_counter() - t0
    for name, text in (("gpu_check.json", json.dumps(report, indent=1, default=str)),
                       ("gpu_check.md", markdown(report))):
        tmp = out / f".{name}.tmp"
        tmp.write_text(text)
        tmp.replace(out / name)


def run_section(name: str, budget: float, dry: bool, out: pathlib.Path, report: dict,
                log, t0: float, notebooks=None) -> float:
    """Run one section in a child process group; returns the seconds it took."""
    sec = report["sections"][name] = {"status": "running", "budget_s": budget, "seconds": 0.0,
                                      "info": {}, "rows": []}
    write(report, out, t0)
    start = time.monotonic()
    cmd = [sys.executable, __file__, "--section", name, "--out", str(out), "--budget", str(budget),
           *(["--notebooks", *notebooks] if notebooks else [])]
    proc = subprocess.Popen(cmd + (["--dry-run"] if dry else []), cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=log, start_new_session=True, bufsize=0)
    buf = b""
    status = None
    while status is None:
        left = budget - (time.monotonic() - start)
        if left <= 0:
            _kill(proc)
            status = "cut off at its budget"
            break
        ready, _, _ = select.select([proc.stdout], [], [], min(left, 1.0))
        if ready:
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                rc = proc.wait()
                status = "done" if rc == 0 else f"failed (exit {rc}; see gpu_check.log)"
            buf += chunk
        *lines, buf = buf.split(b"\n")
        for raw in lines:
            line = raw.decode(errors="replace")
            if line.startswith(ROW):
                sec["rows"].append(json.loads(line[len(ROW):]))
            elif line.startswith(INFO):
                sec["info"].update(json.loads(line[len(INFO):]))
            log.write((line + "\n").encode())
            log.flush()
        sec["seconds"] = time.monotonic() - start
        if lines:
            write(report, out, t0)
    sec["status"], sec["seconds"] = status, time.monotonic() - start
    write(report, out, t0)
    print(f"[gpu_check] {name}: {status} in {sec['seconds']:.1f} s, {len(sec['rows'])} rows", flush=True)
    return sec["seconds"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU, under a minute")
    ap.add_argument("--out", default=None, help="report folder (default $OUT, else gpu_check_out)")
    ap.add_argument("--only", nargs="+", choices=list(SECTIONS), help="these sections only")
    ap.add_argument("--budget", type=float, default=None,
                    help="total seconds (default: the sections' budgets, 390 s; dry run 420 s, "
                         "which takes about 50 on an idle machine)")
    ap.add_argument("--notebooks", nargs="+", metavar="PATH",
                    help=f"the notebooks section's notebooks (default: {len(NOTEBOOKS)} chapters)")
    ap.add_argument("--section", choices=list(SECTIONS), help=argparse.SUPPRESS)
    ap.add_argument("--notebook", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    out = pathlib.Path(a.out or os.environ.get("OUT") or "gpu_check_out")
    out.mkdir(parents=True, exist_ok=True)
    if a.notebook:
        _notebook(a.notebook[0], a.notebook[1], int(a.notebook[2]))
        return 0
    if a.section:  # a child: the section itself
        fn = globals()[a.section]
        if a.section == "notebooks":
            fn(a.dry_run, a.budget, out, a.notebooks)
        elif a.section == "sim":   # it writes a file of its own beside the report
            fn(a.dry_run, out)
        else:
            fn(a.dry_run)
        return 0
    names = a.only or list(SECTIONS)
    budgets = {n: SECTIONS[n][1 if a.dry_run else 0] for n in names}
    if a.budget is not None:  # scaled to the total asked for
        scale = a.budget / sum(budgets.values())
        budgets = {n: b * scale for n, b in budgets.items()}
    report = {"started": datetime.datetime.now().isoformat(timespec="seconds"), "dry_run": a.dry_run,
              "command": " ".join([os.path.relpath(__file__, ROOT), *(argv or sys.argv[1:])]),
              "sections": {}}
    t0 = time.perf_counter()
    slack = 0.0
    with open(out / "gpu_check.log", "ab") as log:
        for name in names:
            took = run_section(name, budgets[name] + slack, a.dry_run, out, report, log, t0,
                               a.notebooks)
            slack = max(0.0, budgets[name] + slack - took)
    missed = [r for s in report["sections"].values() for r in s["rows"] if r.get("ok") is False]
    broken = [n for n, s in report["sections"].items() if s["status"] != "done"]
    print(f"[gpu_check] {report['seconds']:.0f} s; {len(missed)} targets missed; "
          f"sections not done: {', '.join(broken) or 'none'}; report in {out}/gpu_check.md", flush=True)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
