"""The runner: results by rank, failures surfaced (raise, SIGKILL, hang), no orphans, no clashes."""
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import cloudpickle
import pytest
import torch

import lab
from lab.runtime import LaunchError, launch


def _rank_info(ctx, base):
    t = torch.tensor([float(ctx.rank + base)])
    ctx.comm.allreduce(t)
    return {"rank": ctx.rank, "world": ctx.world_size, "sum": t.item(), "backend": ctx.backend}


def _raise_on_1(ctx):
    if ctx.rank == 1:
        raise ValueError("boom on purpose")
    ctx.comm.barrier()  # rank 0 waits for a peer that never comes
    return ctx.rank


def _sigkill_mid_collective(ctx):
    if ctx.rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    ctx.comm.allreduce(torch.ones(1000))
    return ctx.rank


def _abort_mid_collective(ctx):
    if ctx.rank == 1:
        print("rank 1 about to abort", file=sys.stderr, flush=True)
        os.abort()  # what a C++ `terminate` inside gloo does
    ctx.comm.allreduce(torch.ones(1000))  # rank 0's peer vanishes: "Connection reset by peer"
    return ctx.rank


class _Trailered(RuntimeError):
    pass


def _multiline_on_0(ctx):
    if ctx.rank == 0:  # torch's C++ errors look like this: message, blank line, "At:" frames
        raise _Trailered("the real reason\nmore detail\n\nAt:\n  /x/hook.py(615): decompress")
    ctx.comm.barrier()
    return ctx.rank


def _peer_lost(ctx):
    raise RuntimeError("[pair.cc:537] Read error: Connection reset by peer.\n\nAt:\n  x.py(1): f")


def _fail_to_connect(marks: str, fails: int):
    """Unpickled in each rank before it joins the group: the first ``fails`` unpickles (over
    all ranks and launches, counted with files only one process can create) raise what gloo
    raises when it cannot connect its full mesh."""
    n = 0
    while True:
        try:
            os.close(os.open(os.path.join(marks, str(n)), os.O_CREAT | os.O_EXCL))
            break
        except FileExistsError:
            n += 1
    if n < fails:
        raise RuntimeError("Gloo connectFullMesh failed with [pair.cc:553] Connection closed by "
                           "peer [127.0.0.1]:1")
    return "joined"


class _ConnectsAfter:
    """An argument whose unpickling fails like a gloo connect, ``fails`` times in all."""

    def __init__(self, marks, fails):
        self.marks, self.fails = marks, fails

    def __reduce__(self):
        return _fail_to_connect, (self.marks, self.fails)


def _hang(ctx):
    if ctx.rank == 0:
        time.sleep(600)
    return ctx.rank


def _slow_but_stepping(ctx):
    for step in range(20):  # 8 s in all, never more than 0.4 s without a report
        time.sleep(0.4)
        ctx.progress(step + 1, 20)
        ctx.comm.barrier()  # the ranks stay in step, as training does
    return ctx.rank


def _big(ctx):
    return torch.full((4_000_000,), float(ctx.rank))  # 16 MB per rank through the queue


def _pid(ctx):
    return os.getpid()


def _children():
    import multiprocessing as mp
    return [p for p in mp.active_children() if p.name.startswith("lab-rank")]


def test_results_come_back_ordered_by_rank():
    out = launch(_rank_info, 3, 10)
    assert [o["rank"] for o in out] == [0, 1, 2]
    assert all(o["sum"] == 33.0 and o["world"] == 3 and o["backend"] == "gloo" for o in out)


def test_a_function_defined_at_runtime_is_shipped_by_value():
    scale = 7
    out = launch(lambda ctx: ctx.rank * scale, 2)  # as a notebook-defined function would be
    assert out == [0, 7]


def test_rank_that_raises_names_the_rank_and_its_traceback():
    with pytest.raises(LaunchError) as e:
        launch(_raise_on_1, 2, timeout=20)
    assert e.value.rank == 1
    assert "boom on purpose" in str(e.value) and "_raise_on_1" in e.value.remote_traceback
    assert not _children()


def test_rank_killed_by_sigkill_mid_collective_ends_all_ranks():
    t0 = time.monotonic()
    with pytest.raises(LaunchError, match="rank 1 of 2 was killed by SIGKILL"):
        launch(_sigkill_mid_collective, 2, timeout=30)
    # the death is seen, not waited out: the error names it (a timeout names no signal) and
    # comes before the 30 s timeout could fire, however slow the machine's start-up
    assert time.monotonic() - t0 < 30
    assert not _children()


def test_rank_that_aborts_mid_collective_is_the_cause_not_its_peer():
    with pytest.raises(LaunchError) as e:
        launch(_abort_mid_collective, 2, timeout=30)
    first = str(e.value).splitlines()[0]
    assert e.value.rank == 1 and first == "rank 1 of 2 was killed by SIGABRT; all ranks were ended"
    # what it printed before dying, and the Python stack faulthandler dumped on the signal
    assert "rank 1 about to abort" in e.value.stderr and "_abort_mid_collective" in e.value.stderr
    assert e.value.stderr in str(e.value) and not _children()


def test_multiline_exception_gives_its_own_first_line():
    with pytest.raises(LaunchError) as e:
        launch(_multiline_on_0, 2, timeout=30)
    first = str(e.value).splitlines()[0]
    assert e.value.rank == 0
    assert first == "rank 0 of 2 failed: test_runtime._Trailered: the real reason", first
    assert "more detail" in e.value.remote_traceback and "At:" in e.value.remote_traceback


def test_when_every_rank_only_reports_peer_loss_the_earliest_is_named():
    with pytest.raises(LaunchError) as e:
        launch(_peer_lost, 2, timeout=30)
    assert str(e.value).splitlines()[0].endswith("RuntimeError: [pair.cc:537] Read error: "
                                                  "Connection reset by peer.")


def test_ranks_that_all_fail_to_connect_are_launched_once_more(tmp_path, capfd):
    # gloo's full mesh sometimes fails to connect on a loaded machine although no rank failed:
    # the ranks say so before fn ran, and the launch starts again with new processes
    out = launch(lambda ctx, a: (ctx.rank, a), 2, _ConnectsAfter(str(tmp_path), 2), timeout=30)
    assert out == [(0, "joined"), (1, "joined")]
    assert "gloo could not connect the 2 ranks" in capfd.readouterr().err
    (tmp_path / "again").mkdir()
    with pytest.raises(LaunchError, match="connectFullMesh") as e:   # it tries twice, no more
        launch(lambda ctx, a: a, 2, _ConnectsAfter(str(tmp_path / "again"), 4), timeout=30)
    assert len(os.listdir(tmp_path / "again")) == 4
    # one rank failing to connect while the others are still connecting is the same flake (a
    # clean-clone CI run: one of 4 ranks reported it, the others had not yet): launched again
    (tmp_path / "one").mkdir()
    out = launch(lambda ctx, a: a, 2, _ConnectsAfter(str(tmp_path / "one"), 1), timeout=30)
    assert out == ["joined", "joined"] and len(os.listdir(tmp_path / "one")) == 4
    assert e.value.rank in (0, 1) and not _children()


def test_hanging_rank_times_out_and_is_ended():
    # when the timeout fires is decided on a fake clock (below); here, that a real hang ends.
    # Warm, it took 3.16-3.22 s idle and beside 1 or 3 CPU hogs (4 runs each); a cold start
    # added 2.8 s. The bound allows the ending's 3 s (stacks, SIGTERM, SIGKILL) and a start-up
    # four times that cold one, so only a launch that does not end fails it.
    launch(_pid, 2)
    t0 = time.monotonic()
    with pytest.raises(LaunchError, match="made no progress for 3 s"):
        launch(_hang, 2, timeout=3)
    assert time.monotonic() - t0 < 3 + 3 + 4 * 2.8
    assert not _children()


class _FakeClock:
    """``time`` for lab.runtime.launch: ``monotonic`` reads a clock that only a wait moves."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self):
        return self.now

    def sleep(self, s):
        self.now += s


class _FakeQueue:
    """The ranks' result queue on a fake clock: each message arrives at its time."""

    def __init__(self, clock, messages):
        self.clock, self.messages = clock, sorted(messages, key=lambda m: m[0])

    def get(self, timeout):
        if self.messages and self.messages[0][0] <= self.clock.now + timeout:
            t, msg = self.messages.pop(0)
            self.clock.now = max(self.clock.now, t)
            return msg
        self.clock.now += timeout
        raise queue.Empty


class _Alive:
    pid, exitcode = None, None

    def is_alive(self):
        return True


def _collect_on_a_fake_clock(monkeypatch, messages, timeout=3.0):
    import importlib
    launch_mod = importlib.import_module("lab.runtime.launch")   # the module, not the function
    clock = _FakeClock()
    monkeypatch.setattr(launch_mod, "time", clock)
    try:
        out = launch_mod._collect([_Alive(), _Alive()], _FakeQueue(clock, messages), 2, timeout,
                                  False, [], [], ["/nonexistent/stack-0", "/nonexistent/stack-1"])
    except LaunchError as e:
        return clock.now, e
    return clock.now, out


def test_the_timeout_is_time_without_progress_on_a_fake_clock(monkeypatch):
    # the decision alone, on a clock no machine's load can move: progress every second for
    # ten seconds keeps a 3 s timeout away; three seconds of silence after it end the launch
    ticks = [(float(t), ("progress", 0, t, 20)) for t in range(1, 11)]
    now, err = _collect_on_a_fake_clock(monkeypatch, ticks)
    assert isinstance(err, LaunchError) and "made no progress for 3 s" in str(err)
    assert 13.0 < now <= 13.1
    now, err = _collect_on_a_fake_clock(monkeypatch, [])          # silent from the start
    assert isinstance(err, LaunchError) and 3.0 < now <= 3.1
    done = [(12.0, ("ok", r, None, cloudpickle.dumps(r))) for r in (0, 1)]
    now, out = _collect_on_a_fake_clock(monkeypatch, ticks + done)  # 2 s after the last tick
    assert out == [0, 1] and now == 12.0


def test_timeout_counts_time_without_progress_not_the_whole_run():
    launch(_pid, 2)  # a warm forkserver: start-up is not what this test times
    assert launch(_slow_but_stepping, 2, timeout=3.5, progress=False) == [0, 1]


def test_large_results_do_not_deadlock():
    out = launch(_big, 2)
    assert [o[0].item() for o in out] == [0.0, 1.0] and out[1].numel() == 4_000_000


def test_twenty_launches_back_to_back_no_port_clash_no_leftovers():
    pids = set()
    for i in range(20):
        out = launch(_rank_info, 2, i)
        assert out[1]["sum"] == 2 * i + 1
        pids.update(launch(_pid, 1))
    time.sleep(0.2)
    assert not _children()
    for pid in pids:  # every rank process is gone
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_spawn_start_method_also_works():
    assert launch(_rank_info, 2, 0, start_method="spawn")[1]["sum"] == 1.0


@pytest.mark.parametrize("bad", [0, -1, 2.0, "2", True, None])
def test_bad_world_size_is_refused_before_any_process(bad):
    with pytest.raises(ValueError, match="world_size"):
        launch(_rank_info, bad, 0)


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="timeout"):
        launch(_rank_info, 1, 0, timeout=-1)
    with pytest.raises(ValueError, match="backend"):
        launch(_rank_info, 1, 0, backend="mpi")
    with pytest.raises(ValueError, match="bandwidth"):
        launch(_rank_info, 1, 0, network=lab.Network(latency=0.0, bandwidth=-5))
    with pytest.raises(TypeError, match="cannot be sent to worker processes"):
        launch(_rank_info, 1, threading.Lock())
    with pytest.raises(TypeError, match="callable"):
        launch(42, 1)


def test_no_gpu_means_gloo_on_cpu_and_nccl_is_refused():
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    assert launch(_rank_info, 1, 0)[0]["backend"] == "gloo"
    with pytest.raises(ValueError, match="nccl"):
        launch(_rank_info, 2, 0, backend="nccl")


@pytest.mark.parametrize("gpus, world, backend, device, want", [
    (0, 4, "auto", "auto", ("gloo", "cpu")),
    (1, 8, "auto", "auto", ("gloo", "cuda")),   # ranks share one GPU: compute there, gloo between
    (8, 8, "auto", "auto", ("nccl", "cuda")),   # a GPU per rank: NCCL
    (8, 4, "auto", "auto", ("nccl", "cuda")),
    (8, 4, "auto", "cpu", ("gloo", "cpu")),     # the GPUs can be left alone
    (8, 4, "gloo", "auto", ("gloo", "cuda")),
])
def test_backend_and_device_follow_the_gpus_visible(monkeypatch, gpus, world, backend, device, want):
    from lab.runtime.context import pick_backend
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    assert pick_backend(world, backend, device) == want


def test_ranks_spread_over_the_gpus_visible(monkeypatch):
    from lab.runtime.context import rank_device
    chosen = []
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    assert [rank_device(r, "cuda").index for r in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert [d.index for d in chosen] == [0, 1, 2, 0, 1, 2, 0]
    assert rank_device(5, "cpu") == torch.device("cpu")


def test_too_few_gpus_for_nccl_is_refused(monkeypatch):
    from lab.runtime.context import pick_backend
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(ValueError, match="world_size=4, GPUs=2"):
        pick_backend(4, "nccl", "auto")


def test_profiles_and_the_device_override(monkeypatch):
    from lab.nb import profile
    monkeypatch.delenv("LAB_DEVICE", raising=False)
    monkeypatch.setenv("LAB_PROFILE", "gpu")
    assert profile().name == "gpu" and profile().device == "auto" and profile("ci").device == "cpu"
    monkeypatch.setenv("LAB_DEVICE", "cpu")  # the gpu profile's sizes, computed on the CPU
    assert profile().device == "cpu" and profile().workers == 8
    monkeypatch.setenv("LAB_DEVICE", "tpu")
    with pytest.raises(ValueError, match="LAB_DEVICE"):
        profile()
    monkeypatch.setenv("LAB_PROFILE", "huge")
    with pytest.raises(ValueError, match="LAB_PROFILE"):
        profile()


def _rss_kept_after_free(ctx=None, mb=64):
    """Resident MB still held after a ``mb`` MB tensor is touched and freed."""
    page = os.sysconf("SC_PAGE_SIZE")

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * page / 2 ** 20
    before = rss()
    x = torch.ones(mb * 2 ** 18)  # mb MB of float32, every page touched
    del x
    return rss() - before


def _kept_in_fresh_process(env):
    code = ("from lab.runtime.allocator import keep_freed_memory as k; k(); "
            "from tests.test_runtime import _rss_kept_after_free as f; print(f())")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, check=True,
                         capture_output=True, text=True, cwd=os.path.dirname(os.path.dirname(__file__)))
    return float(out.stdout.split()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc tuning")
def test_ranks_keep_freed_memory_for_the_next_step():
    # glibc's defaults map a 64 MB block and hand it back on free; the tuned allocator keeps it
    assert launch(_rss_kept_after_free, 1)[0] > 48
    assert _kept_in_fresh_process({}) > 48
    assert _kept_in_fresh_process({"LAB_KEEP_FREED_MEMORY": "0"}) < 16
