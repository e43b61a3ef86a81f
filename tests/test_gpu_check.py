"""The GPU check's dry run (``tools/gpu_check.py --dry-run``): every section runs on the CPU
with tiny sizes, so the check cannot rot between the rare GPU runs; and a section past its
budget is cut off with what it measured kept and nothing left running."""
import json
import pathlib
import subprocess
import sys
import tarfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
CHECK = ROOT / "tools" / "gpu_check.py"


def _run(out, *args, timeout=420):
    return subprocess.run([sys.executable, str(CHECK), "--out", str(out), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def test_dry_run_measures_every_section(tmp_path):
    run = _run(tmp_path, "--dry-run")
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    secs = report["sections"]
    assert list(secs) == ["machine", "tests", "codecs", "sim", "hooks", "p3", "notebooks"]
    assert all(s["status"] == "done" for s in secs.values()), {n: s["status"] for n, s in secs.items()}
    assert report["dry_run"] and report["seconds"] < 400
    assert secs["machine"]["info"]["torch"] and "cpu cores" in secs["machine"]["info"]
    tests, = secs["tests"]["rows"]
    assert tests["ok"] and tests["failed"] == 0 and tests["skipped"] > 0  # no GPU: all skip
    import lab.compress
    from lab.bench.codecs import DEFAULT
    codecs = {r["codec"] for r in secs["codecs"]["rows"]}
    assert codecs == {c for c in DEFAULT if c in lab.compress.names()}
    assert all(r["x copy"] > 0 for r in secs["codecs"]["rows"])
    sims = {r["model"]: r for r in secs["sim"]["rows"]}
    assert set(sims) == {"resnet50", "vgg19"} and all(r["profile ms"] > 0 for r in sims.values())
    stored = json.loads((tmp_path / "sim_profiles.json").read_text())
    assert stored["resnet50"]["layers"] and stored["resnet50"]["device"] == "cpu"
    hooks = {(r["hook"], r["ranks"]) for r in secs["hooks"]["rows"]}
    assert ("lab powersgd_hook", 2) in hooks and ("torch fp16_compress_hook", 1) in hooks
    assert {r["schedule"] for r in secs["p3"]["rows"]} >= {"sync", "fifo", "p3"}
    nb, = secs["notebooks"]["rows"]
    assert nb["result"] == "passed" and nb["ok"]
    with tarfile.open(tmp_path / "notebooks.tar.gz") as tar:
        assert tar.getnames() == ["dry_run.ipynb"]
    md = (tmp_path / "gpu_check.md").read_text()
    assert "## codecs: done" in md and "| lab powersgd_hook |" in md


def test_a_section_past_its_budget_is_cut_off_and_leaves_nothing_running(tmp_path):
    run = _run(tmp_path, "--dry-run", "--only", "p3", "--budget", "4", timeout=60)
    assert run.returncode == 1
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["sections"]["p3"]["status"] == "cut off at its budget"
    left = subprocess.run(["pgrep", "-f", f"{CHECK} --section"], capture_output=True, text=True)
    assert left.stdout.strip() == ""
