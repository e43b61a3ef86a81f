"""The runner leaves nothing behind and explains what went wrong (issue 41, items 8-10).

Killing the caller (SIGKILL or SIGTERM, as a notebook kernel's restart does) ends every rank
and every process a rank started; a rank that fails takes its children with it; ranks may
start processes (a DataLoader with workers, a launch of their own); mismatched collectives
and hangs name the collective, the ranks and what differs; an infinite timeout means none.
"""
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from lab.runtime import LaunchError, launch

ROOT = pathlib.Path(__file__).resolve().parents[1]
linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux: /proc, pidfd")


def _alive(pid: int) -> bool:
    """Running (a zombie has exited: it only waits to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def _descendants(pid: int) -> set[int]:
    parents = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    parents[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (FileNotFoundError, ProcessLookupError, IndexError):
                pass
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        kids = {c for c, pp in parents.items() if pp == p}
        todo.extend(kids - out)
        out |= kids
    return out


def _gone_within(pids, seconds: float) -> set[int]:
    """The pids still running after ``seconds`` (empty: all gone)."""
    end = time.monotonic() + seconds
    left = {p for p in pids if _alive(p)}
    while left and time.monotonic() < end:
        time.sleep(0.05)
        left = {p for p in left if _alive(p)}
    return left


def _start_child(marks: str, rank: int) -> int:
    """A process of the rank's own (as a DataLoader worker or a tool it runs would be)."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    with open(os.path.join(marks, f"rank{rank}.pids"), "w") as f:
        f.write(f"{os.getpid()} {child.pid}\n")
    return child.pid


CALLER = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, {tests!r})
    from test_runtime_cleanup import _start_child
    from lab.runtime import launch

    def work(ctx, marks):
        _start_child(marks, ctx.rank)
        ctx.comm.barrier()
        time.sleep(120)

    if __name__ == "__main__":
        launch(work, 2, sys.argv[1], timeout=300, progress=False)
""")


@linux
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killing_the_caller_ends_every_rank_and_what_it_started(tmp_path, sig):
    script = tmp_path / "caller.py"
    script.write_text(CALLER.format(tests=str(ROOT / "tests")))
    caller = subprocess.Popen([sys.executable, str(script), str(tmp_path)], cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        marks = [tmp_path / f"rank{r}.pids" for r in range(2)]
        end = time.monotonic() + 120
        while not all(m.exists() and m.read_text().endswith("\n") for m in marks):
            assert caller.poll() is None and time.monotonic() < end, "the ranks did not start"
            time.sleep(0.1)
        run = {int(p) for m in marks for p in m.read_text().split()}   # ranks and their children
        run |= _descendants(caller.pid)                                 # and the forkserver
        assert len(run) >= 4 and all(_alive(p) for p in run)
        caller.send_signal(sig)
        caller.wait(10)
        left = _gone_within(run, 3.0)
        assert not left, f"left running 3 s after the caller got {sig.name}: {left}"
    finally:
        if caller.poll() is None:
            caller.kill()


def _child_then(ctx, marks, how):
    _start_child(marks, ctx.rank)
    ctx.comm.barrier()
    if how == "return":
        return ctx.rank   # the children outlive the function: the launch ends them
    if ctx.rank == 1:
        if how == "raise":
            raise ValueError("rank 1 fails on purpose")
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)


def _child_pids(marks) -> set[int]:
    return {int(line.split()[1]) for f in pathlib.Path(marks).glob("rank*.pids")
            for line in f.read_text().splitlines()}


@linux
@pytest.mark.parametrize("how", ["raise", "sigkill", "return"])
def test_a_rank_takes_the_processes_it_started_with_it(tmp_path, how):
    if how == "return":
        assert launch(_child_then, 2, str(tmp_path), how, timeout=60) == [0, 1]
    else:
        with pytest.raises(LaunchError) as e:
            launch(_child_then, 2, str(tmp_path), how, timeout=60)
        assert e.value.rank == 1
    kids = _child_pids(tmp_path)
    assert len(kids) == 2 and not _gone_within(kids, 3.0)


def _dataloader_and_nested_launch(ctx):
    from torch.utils.data import DataLoader, TensorDataset
    data = TensorDataset(torch.arange(64.0))
    seen = sum(float(b[0].sum()) for b in DataLoader(data, batch_size=8, num_workers=2))
    inner = launch(lambda c: c.rank * 10, 2, progress=False, timeout=120) if ctx.rank == 0 else None
    return seen, inner


def test_ranks_may_start_processes_of_their_own():
    (s0, inner), (s1, none) = launch(_dataloader_and_nested_launch, 2, timeout=240,
                                     progress=False)
    assert s0 == s1 == sum(range(64)) and inner == [0, 10] and none is None


def _mismatch(ctx, kind):
    if kind == "size":
        ctx.comm.allreduce(torch.ones(10 if ctx.rank == 0 else 20))
    elif kind == "dtype":
        ctx.comm.allreduce(torch.ones(10, dtype=torch.float32 if ctx.rank == 0 else torch.float64))
    elif kind == "skip":
        if ctx.rank == 0:
            ctx.comm.allreduce(torch.ones(10))
    return ctx.rank


@pytest.mark.parametrize("kind", ["size", "dtype"])
def test_tensors_of_different_sizes_or_dtypes_name_the_collective_and_the_mismatch(kind):
    with pytest.raises(LaunchError) as e:
        launch(_mismatch, 2, kind, timeout=60, progress=False)
    first = str(e.value).splitlines()[0]
    assert first.startswith("mismatched collective: rank "), first
    assert "in allreduce (called at " in first and "test_runtime_cleanup.py" in first
    assert "different sizes or dtypes" in first and "gloo received" in first


def test_a_skipped_collective_names_the_rank_that_returned():
    with pytest.raises(LaunchError) as e:
        launch(_mismatch, 2, "skip", timeout=60, progress=False)
    first = str(e.value).splitlines()[0]
    assert e.value.rank == 0 and "in allreduce (called at " in first
    assert "rank(s) [1] had already returned" in first and "skipped" in first


def _rank_1_hangs(ctx, beat):
    if ctx.rank == 1:
        time.sleep(120)
    if beat:   # rank 0 keeps reporting progress: gloo's own timeout fires, not the launch's
        import threading

        def report():
            for i in range(1000):
                ctx.progress(i, 1000)
                time.sleep(0.3)
        threading.Thread(target=report, daemon=True).start()
    ctx.comm.allreduce(torch.ones(10))


@pytest.mark.parametrize("beat", [False, True])
def test_a_timeout_names_the_rank_that_stopped_not_the_one_waiting_for_it(beat):
    with pytest.raises(LaunchError) as e:
        launch(_rank_1_hangs, 2, beat, timeout=10, progress=False)
    first = str(e.value).splitlines()[0]
    assert e.value.rank == 1, str(e.value)
    assert first.startswith("timeout: rank 1 of 2 ") and "_rank_1_hangs" in first
    assert "not in a collective" in first and "rank(s) 0 wait for it in allreduce" in first


def _two_ranks_in_different_collectives(ctx):
    if ctx.rank == 0:
        ctx.comm.allreduce(torch.ones(4))
    else:
        ctx.comm.broadcast(torch.ones(4), src=1)


def test_ranks_waiting_in_collectives_that_cannot_complete_are_each_named():
    with pytest.raises(LaunchError) as e:
        launch(_two_ranks_in_different_collectives, 2, timeout=10, progress=False)
    text = str(e.value)
    if "every rank still running" in text:   # gloo may also hang both: each one is named
        assert "allreduce" in text and "broadcast" in text
        assert "rank 0: in allreduce" in text and "rank 1: in broadcast" in text
    else:   # or gloo aborts one of them: the mismatch is named
        assert text.startswith("mismatched collective") or "failed" in text.splitlines()[0]


def _rank(ctx):
    return ctx.rank


def test_an_infinite_timeout_means_no_timeout():
    assert launch(_rank, 2, timeout=float("inf"), progress=False) == [0, 1]
    for bad in (float("nan"), 0, -1.0, True):
        with pytest.raises(ValueError, match="float\\('inf'\\): no timeout"):
            launch(_rank, 2, timeout=bad)
