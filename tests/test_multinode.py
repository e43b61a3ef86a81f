"""Two torchrun "nodes" on one machine run ``python -m lab train`` as two machines would.

Each node is one ``torchrun --nnodes 2 --nproc-per-node 2 ... -m lab train ...`` (world size 4),
started with ``subprocess.Popen`` exactly as it is typed on each of two machines
(book/01_foundations/cluster.md shows that command); here HOST is 127.0.0.1 and gloo is told to
use the loopback interface, so nothing listens beyond this machine's loopback for peers. The run
must equal one launch of 4 ranks on one machine: the same config, the same loss curve, the same
bytes in the ledger, and no emulated network (modeled time 0, measured time > 0).

Two rendezvous forms: c10d (the same command on every node; ranks are assigned at rendezvous)
and static (``--master-addr/--master-port``; the commands differ only in ``--node-rank``).
On failure or timeout both nodes and every worker they started are ended, by process id.
"""
import os
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest

from lab import data as data_mod, models
from lab.train import History, TrainConfig, train

STEPS = 5
TRAIN = ["-m", "lab", "train", "--model", "mlp", "--data", "digits", "--steps", str(STEPS),
         "--compressor", "fp16"]
CFG = TrainConfig(model="mlp", data="digits", steps=STEPS, compressor="fp16")  # the same run
HOST = "127.0.0.1"
DEADLINE = 420  # seconds for both nodes; about 30 s on an idle 2-core machine


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def node_command(rendezvous: str, node_rank: int, port: int, out) -> list[str]:
    """What one of two machines runs (``torchrun`` is ``python -m torch.distributed.run``)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "2"]
    if rendezvous == "c10d":  # the same command on every node
        cmd += ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"{HOST}:{port}",
                "--rdzv-id", "lab-multinode-test", "--local-addr", HOST]
    else:  # static: node 0 hosts the store; each node names its rank
        cmd += ["--master-addr", HOST, "--master-port", str(port), "--node-rank", str(node_rank)]
    return cmd + TRAIN + ["--out", str(out)]


def _env() -> dict:
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = "1"  # what lab.launch's ranks use: the same float results
    env["GLOO_SOCKET_IFNAME"] = "lo" if sys.platform.startswith("linux") else "lo0"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _tree(procs, seen: dict) -> None:
    """Remember every process the nodes started (by pid and start time), to end them later."""
    for p in procs:
        try:
            for c in psutil.Process(p.pid).children(recursive=True):
                seen.setdefault((c.pid, c.create_time()), c)
        except psutil.Error:
            pass


def _end(procs, seen: dict) -> list[int]:
    """End the nodes (SIGTERM: torchrun stops its workers), then SIGKILL anything left, by
    pid; returns the pids that had to be killed."""
    _tree(procs, seen)
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=30)
    killed = []
    for c in seen.values():
        try:
            # same pid and start time: still the process we started (a zombie is already dead)
            if c.is_running() and c.status() != psutil.STATUS_ZOMBIE:
                c.kill()
                killed.append(c.pid)
        except psutil.Error:
            pass
    psutil.wait_procs(list(seen.values()), timeout=30)
    return killed


def run_two_nodes(rendezvous: str, tmp_path) -> tuple[list[int], list[str]]:
    """Start node 0 and node 1; wait for both; return their exit codes and outputs."""
    port, out = _free_port(), tmp_path / "out"
    logs = [tmp_path / f"node{i}.log" for i in range(2)]
    procs, seen = [], {}
    try:
        for i in range(2):
            with open(logs[i], "w") as f:
                procs.append(subprocess.Popen(node_command(rendezvous, i, port, out), cwd=tmp_path,
                                              env=_env(), stdout=f, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            _tree(procs, seen)
            codes = [p.poll() for p in procs]
            if all(c is not None for c in codes) or any(c not in (None, 0) for c in codes):
                break
            time.sleep(0.5)
    finally:
        leftovers = _end(procs, seen)
    texts = [log.read_text() for log in logs]
    codes = [p.returncode for p in procs]
    if codes != [0, 0]:
        tails = "\n".join(f"--- node {i} (exit {c}) ---\n{t[-3000:]}"
                          for i, (c, t) in enumerate(zip(codes, texts)))
        pytest.fail(f"two-node run failed or passed {DEADLINE} s (nodes ended):\n{tails}")
    assert not leftovers, f"processes still running after both nodes exited: {leftovers}"
    return codes, texts


@pytest.fixture(scope="module")
def single():
    """The reference: one launch of 4 ranks on this machine."""
    return train(CFG, 4, timeout=300)


@pytest.mark.timeout(DEADLINE + 240)
@pytest.mark.parametrize("rendezvous", ["c10d", "static"])
def test_two_torchrun_nodes_equal_one_launch_of_four_ranks(rendezvous, single, tmp_path):
    _, texts = run_two_nodes(rendezvous, tmp_path)
    assert sum("wrote " in t for t in texts) == 1  # rank 0 lives on one node; it alone writes
    h = History.from_json(tmp_path / "out" / "history.json")
    assert h.world_size == single.world_size == 4
    assert h.config == single.config                # the flags built the same TrainConfig
    assert h.loss == pytest.approx(single.loss, rel=1e-6, abs=0)  # bit-equal here
    assert h.test_loss == pytest.approx(single.test_loss, rel=1e-6, abs=0)
    assert h.test_acc == single.test_acc and h.eval_step == single.eval_step == [STEPS]
    n = sum(p.numel() for p in models.make("mlp", data_mod.load("digits")).parameters())
    assert h.bytes == single.bytes == [2 * n] * STEPS  # one fp16 allreduce per step, exact
    assert h.recv_bytes == single.recv_bytes
    assert h.rank_bytes == single.rank_bytes == [2 * n * STEPS] * 4
    # no --network: nothing is emulated; the ledger's seconds are the real collectives
    assert h.modeled_comm_s == [0.0] * STEPS and all(s > 0 for s in h.comm_s)


def test_two_nodes_in_namespaces_over_a_shaped_link(single, tmp_path):
    """The two nodes as two network namespaces, each with its own address and a NIC shaped to
    1 Gb/s (lab.comm.kernel), rendezvous over c10d across that link: the same run as one
    launch of 4 ranks, bit for bit; afterwards no namespace and no process of the run is left."""
    from lab.comm import Network, kernel
    why = kernel.unavailable()
    if why:
        pytest.skip(f"kernel links unavailable: {why}")
    out, procs, seen = tmp_path / "out", [], {}
    logs = [tmp_path / f"node{i}.log" for i in range(2)]
    with kernel.KernelCluster(2, Network.parse("1Gbps")) as nodes:
        host, port = nodes.address(0), 29400  # a fresh namespace: the port is free
        env = {**_env(), "GLOO_SOCKET_IFNAME": kernel.NIC}
        try:
            for i in range(2):
                # --max-restarts 1: a worker lost while the group forms (a clean-clone CI run
                # saw one abort, exit -6, and the other node lose the store) is restarted by
                # torchrun's own agents, as on a real cluster; the run is deterministic, so a
                # restarted run is still compared bit for bit
                cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
                       "--nproc-per-node", "2", "--max-restarts", "1", "--rdzv-backend", "c10d",
                       "--rdzv-endpoint", f"{host}:{port}", "--rdzv-id", "lab-netns-test",
                       "--local-addr", nodes.address(i),
                       # which node hosts the store: a namespace's addresses are not in the
                       # host's name service, so torchrun cannot tell by itself
                       "--rdzv-conf", f"is_host={'true' if i == 0 else 'false'}",
                       *TRAIN, "--out", str(out)]
                with open(logs[i], "w") as f:
                    procs.append(subprocess.Popen(["ip", "netns", "exec", nodes.namespace(i), *cmd],
                                                  cwd=tmp_path, env=env, stdout=f,
                                                  stderr=subprocess.STDOUT))
            deadline = time.monotonic() + DEADLINE
            while time.monotonic() < deadline and any(p.poll() is None for p in procs):
                _tree(procs, seen)
                if any(p.poll() not in (None, 0) for p in procs):
                    break
                time.sleep(0.5)
        finally:
            leftovers = _end(procs, seen)
        names = [nodes.switch, nodes.namespace(0), nodes.namespace(1)]
    codes = [p.returncode for p in procs]
    assert codes == [0, 0], "\n".join(log.read_text()[-2000:] for log in logs)
    assert not leftovers
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(n in listed for n in names)
    h = History.from_json(out / "history.json")
    assert h.loss == pytest.approx(single.loss, rel=1e-6, abs=0)
    assert h.bytes == single.bytes and h.rank_bytes == single.rank_bytes
