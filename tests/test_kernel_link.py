"""Kernel links (lab.comm.kernel): namespaces made and always removed, gloo's bytes across
shaped NICs, the ledger's wire bytes against the kernel's own counters, a network schedule
reshaping in place, a clear refusal where namespaces cannot be made. Skipped, with the reason,
where they cannot be made (not Linux, not root); CI runs as root and runs them."""
import subprocess

import pytest
import torch

from lab.comm import Network
from lab.comm import kernel as K
from lab.runtime import LaunchError, launch

WHY = K.unavailable()
needs_kernel = pytest.mark.skipif(WHY is not None, reason=f"kernel links unavailable: {WHY}")


def _ours() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(K.PREFIX)]


@needs_kernel
def test_cluster_is_made_and_removed():
    with K.KernelCluster(4, Network.parse("1Gbps")) as c:
        names = set(_ours())
        assert {c.switch, *(c.namespace(r) for r in range(4))} <= names
        assert c.setup_s < 5
        shown = subprocess.run(["tc", "-n", c.namespace(2), "qdisc", "show", "dev", "eth0"],
                               capture_output=True, text=True).stdout
        assert "tbf" in shown and "1Gbit" in shown
    assert not set(_ours()) & names


def _traffic(ctx, n):
    from lab.bench.links import nic_counters
    out = {}
    for op in ("allreduce", "allgather", "broadcast"):
        t = torch.full((n,), float(ctx.rank))
        ctx.comm.barrier()
        c0, mark = nic_counters(), ctx.comm.ledger.mark()
        if op == "allreduce":
            ctx.comm.allreduce(t)
            value = t[0].item()
        elif op == "allgather":
            value = sum(g[0].item() for g in ctx.comm.allgather(t, same_size=True))
        else:
            value = ctx.comm.broadcast(t, 0)[0].item()
        rec = ctx.comm.ledger.since(mark)[0]
        ctx.comm.barrier()
        c1 = nic_counters()
        out[op] = (value, c1[0] - c0[0], c1[1] - c0[1], rec.wire_sent, rec.wire_recv)
    return out, ctx.comm.link


@needs_kernel
@pytest.mark.parametrize("world", [2, 4])
def test_wire_bytes_match_the_kernels_counters(world):
    """The ledger's wire bytes (ring allreduce, ring allgather, binomial broadcast) against the
    bytes each NIC really sent and received: within 5%, plus headers (TCP/IP and Ethernet,
    a few percent at MTU 1500; the barriers' few hundred bytes)."""
    n = 2 ** 20  # 4 MB
    res = launch(_traffic, world, n, network="1Gbps", link="kernel", timeout=120)
    assert not _ours()
    for rank, (ops, link) in enumerate(res):
        assert link == "kernel"
        assert ops["allreduce"][0] == sum(range(world))
        assert ops["allgather"][0] == sum(range(world)) and ops["broadcast"][0] == 0.0
        for op, (_, sent, recv, wsent, wrecv) in ops.items():
            for nic, wire in ((sent, wsent), (recv, wrecv)):
                assert wire * 0.95 <= nic <= wire * 1.05 + 0.04 * 4 * n + 20_000, (rank, op, nic, wire)


def _fails(ctx):
    if ctx.rank == 1:
        raise RuntimeError("rank 1 gives up")
    ctx.comm.barrier()


@needs_kernel
def test_a_failed_run_leaves_no_namespace():
    with pytest.raises(LaunchError, match="rank 1 gives up"):
        launch(_fails, 3, network="100Mbps", link="kernel", timeout=30)
    assert not _ours()


@needs_kernel
def test_stale_namespaces_of_a_dead_process_are_removed():
    dead = 2 ** 22 + 12345  # beyond pid_max's default: no such process
    name = f"{K.PREFIX}{dead}x0-sw"
    subprocess.run(["ip", "netns", "add", name], check=True)
    assert name in K.remove_stale() and name not in _ours()


def _reshaped(ctx):
    ctx.comm.network = Network.parse("50Mbps")  # what a network schedule does at its step
    out = subprocess.run(["tc", "qdisc", "show", "dev", "eth0"], capture_output=True, text=True).stdout
    return out


@needs_kernel
def test_a_changed_network_reshapes_the_nic_in_place():
    shown = launch(_reshaped, 2, network="1Gbps", link="kernel", timeout=60)
    assert all("50Mbit" in s for s in shown)


@needs_kernel
def test_a_kernel_link_needs_a_network():
    with pytest.raises(ValueError, match="network"):
        launch(_fails, 2, link="kernel")


def test_where_namespaces_cannot_be_made_the_error_says_why(monkeypatch):
    monkeypatch.setattr(K, "_probe", {"reason": "making network namespaces needs root"})
    with pytest.raises(RuntimeError, match="needs root.*link='model'"):
        K.KernelCluster(2, Network.parse("1Gbps")).up()
    with pytest.raises(ValueError, match="link must be one of"):
        launch(_fails, 2, network="1Gbps", link="wire")
