"""Kernel links: a miniature cluster on one machine, in network namespaces.

Each rank is a node: a network namespace of its own with one NIC (``eth0``, one end of a veth
pair) plugged into a switch (a bridge in a namespace of its own, non-blocking). Every NIC is
shaped by the kernel's token bucket filter (``tbf``) at the link's rate in both directions: on
``eth0`` inside the rank's namespace (what the rank sends) and on the switch's port (what it
receives). So gloo's bytes cross a real TCP path at a real rate, and a collective's time is
measured, not modeled. The kernel here cannot delay packets (``netem`` is not built in), so a
link's latency stays the alpha-beta model's: :class:`~lab.comm.Collective` adds it per call
(and says so wherever a result is shown).

Shaping details that show in measurements (``python -m lab bench links``): a token bucket lets
``burst`` bytes through at memory speed (at least 64 KiB + a frame, since the kernel hands the
NIC segments of up to 64 KiB; else 1 ms of the rate), so messages below that are latency-bound;
the queue holds 50 ms of the rate.

Every address and route lives inside the namespaces this module creates, under names
``labk<pid>x<n>-<rank>`` and ``-sw``; the host's own interfaces are never touched. A cluster is
torn down by ``KernelCluster.down`` (``with`` does it), and namespaces left by a process
that died are removed by the next cluster (:func:`remove_stale`). Needs Linux, root (or
CAP_NET_ADMIN and CAP_SYS_ADMIN), ``ip`` and ``tc``: :func:`unavailable` says why not.
"""
from __future__ import annotations

import ctypes
import itertools
import os
import platform
import shutil
import subprocess
import threading
import time

from .network import Network

PREFIX = "labk"
SUBNET = "10.77.0"          # inside the cluster's own namespaces only
NIC = "eth0"                 # every rank's NIC, in its own namespace
_CLONE_NEWNET = 0x40000000
_seq = itertools.count()
_probe: dict = {}


def _sh(args: list[str], stdin: str | None = None) -> None:
    run = subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=30)
    if run.returncode:
        raise OSError(f"{' '.join(args[:4])}...: {run.stderr.strip()[:300]}")


def unavailable() -> str | None:
    """Why kernel links cannot be made here (None if they can): checked once per process by
    making one shaped namespace and removing it."""
    if "reason" in _probe:
        return _probe["reason"]
    reason = None
    if platform.system() != "Linux":
        reason = f"network namespaces need Linux (this is {platform.system()})"
    elif not (shutil.which("ip") and shutil.which("tc")):
        reason = "the 'ip' and 'tc' commands (iproute2) are not installed"
    elif os.geteuid() != 0 and not _has_caps():
        reason = "making network namespaces needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN)"
    else:
        name = f"{PREFIX}{os.getpid()}probe"
        try:
            _sh(["ip", "netns", "add", name])
            _sh(["ip", "-n", name, "link", "add", "p0", "type", "veth", "peer", "name", "p1"])
            _sh(["tc", "-n", name, "qdisc", "add", "dev", "p0", "root", "tbf", "rate", "1gbit",
                 "burst", "128kb", "latency", "50ms"])
        except OSError as err:
            reason = f"could not make a shaped namespace: {err}"
        finally:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
    _probe["reason"] = reason
    return reason


def _has_caps() -> bool:
    with open("/proc/self/status") as f:
        eff = next((int(line.split()[1], 16) for line in f if line.startswith("CapEff")), 0)
    return bool(eff & (1 << 12)) and bool(eff & (1 << 21))  # CAP_NET_ADMIN, CAP_SYS_ADMIN


def remove_stale() -> list[str]:
    """Delete the namespaces of clusters whose process is gone (a caller killed by SIGKILL
    cannot tear down its own); returns their names."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    gone = []
    for line in out.splitlines():
        name = line.split()[0] if line.split() else ""
        if not name.startswith(PREFIX):
            continue
        pid = name[len(PREFIX):].split("x")[0].split("probe")[0]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
            gone.append(name)
    return gone


def enter(namespace: str) -> None:
    """Move the calling thread into ``namespace`` (a rank does this before any socket: threads
    it starts later, gloo's among them, inherit it)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/var/run/netns/{namespace}", os.O_RDONLY)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into {namespace}: {os.strerror(err)}")
    finally:
        os.close(fd)


def tbf(network: Network) -> list[str]:
    """The token bucket for ``network``'s rate (``tc ... root tbf`` arguments)."""
    rate = network.bandwidth  # bytes per second
    burst = max(64 * 1024 + 1514, int(rate * 1e-3))
    return ["tbf", "rate", f"{int(rate * 8)}bit", "burst", str(burst), "latency", "50ms"]


class KernelCluster:
    """``world`` ranks as nodes on a switch, each NIC shaped to ``network``'s bandwidth.

    ``up()`` makes it (``setup_s``: how long that took), ``down()`` removes every namespace,
    ``with KernelCluster(...) as c:`` does both. Rank ``r`` enters ``c.namespace(r)``
    (:meth:`join`); its address is ``c.address(r)``; rank 0 hosts the rendezvous store at
    ``STORE_PORT`` there (every node's namespace is new, so the port is free)."""

    STORE_PORT = 29500

    def __init__(self, world: int, network: Network):
        if isinstance(world, bool) or not isinstance(world, int) or not 1 <= world <= 250:
            raise ValueError(f"KernelCluster: world must be an int in [1, 250], got {world!r}")
        if not isinstance(network, Network):
            raise TypeError(f"KernelCluster: network must be a lab.comm.Network, got {network!r}")
        self.world, self.network = world, network
        self.name = f"{PREFIX}{os.getpid()}x{next(_seq)}"
        self.switch = f"{self.name}-sw"
        self.switch_address = f"{SUBNET}.1"
        self.setup_s = 0.0
        self._made: list[str] = []

    def namespace(self, rank: int) -> str:
        """The name of rank ``rank``'s network namespace (its node on the switch)."""
        return f"{self.name}-{rank}"

    def address(self, rank: int) -> str:
        """Rank ``rank``'s IPv4 address on the cluster's subnet (rank 0's hosts the store)."""
        return f"{SUBNET}.{rank + 2}"

    def up(self) -> "KernelCluster":
        """Make the switch, one namespace and shaped NIC per rank; returns the cluster.
        Raises ``RuntimeError`` where kernel links cannot be made (:func:`unavailable` says
        why); if a step fails, what was already made is removed before the error propagates."""
        why = unavailable()
        if why:
            raise RuntimeError(f"link='kernel' is not available here: {why}; "
                               "link='model' (the default) works everywhere")
        remove_stale()
        t0 = time.perf_counter()
        ranks = [self.namespace(r) for r in range(self.world)]
        try:
            root = [f"netns add {n}" for n in (self.switch, *ranks)]
            self._made = [self.switch, *ranks]
            root += [f"link add p{r} netns {self.switch} type veth peer name {NIC} netns {n}"
                     for r, n in enumerate(ranks)]
            _sh(["ip", "-batch", "-"], "\n".join(root) + "\n")
            sw = ["link add br0 type bridge", "link set lo up", "link set br0 up",
                  f"addr add {self.switch_address}/24 dev br0"]
            sw += [f"link set p{r} master br0 up" for r in range(self.world)]
            _sh(["ip", "-n", self.switch, "-batch", "-"], "\n".join(sw) + "\n")
            for r, n in enumerate(ranks):
                _sh(["ip", "-n", n, "-batch", "-"],
                    f"link set lo up\nlink set {NIC} up\naddr add {self.address(r)}/24 dev {NIC}\n")
            self.shape(self.network, "add")
        except BaseException:
            self.down()
            raise
        self.setup_s = time.perf_counter() - t0
        return self

    def shape(self, network: Network, verb: str = "replace") -> None:
        """Shape every NIC, both directions, to ``network``'s bandwidth (in place while ranks
        run: a network schedule's change)."""
        q = " ".join(tbf(network))
        _sh(["tc", "-n", self.switch, "-batch", "-"],
            "".join(f"qdisc {verb} dev p{r} root {q}\n" for r in range(self.world)))
        for r in range(self.world):
            _sh(["tc", "-n", self.namespace(r), "qdisc", verb, "dev", NIC, "root", *tbf(network)])
        self.network = network

    def reshape_rank(self, rank: int, network: Network) -> None:
        """Shape rank ``rank``'s NIC, both directions, to ``network`` (what a rank does itself
        when its run's network changes mid-run: a network schedule)."""
        _sh(["tc", "-n", self.switch, "qdisc", "replace", "dev", f"p{rank}", "root", *tbf(network)])
        _sh(["tc", "-n", self.namespace(rank), "qdisc", "replace", "dev", NIC, "root", *tbf(network)])

    def join(self, rank: int) -> None:
        """In a rank's process, before any socket: enter its node, have gloo use its NIC, and
        make every Collective of this process a kernel-link one."""
        from .collective import use_link
        enter(self.namespace(rank))
        self._hosts()
        os.environ["GLOO_SOCKET_IFNAME"] = NIC
        shaped = {"bandwidth": self.network.bandwidth}

        def reshape(network: Network) -> None:  # only when the rate changes
            if network.bandwidth != shaped["bandwidth"]:
                self.reshape_rank(rank, network)
                shaped["bandwidth"] = network.bandwidth
        use_link("kernel", reshape=reshape)

    def _hosts(self) -> None:
        """Name the cluster's addresses in this process's own view of /etc/hosts (a private
        mount namespace), so that a peer's address resolves at once: without it every
        connection asks a name server this namespace cannot reach, and c10d warns each time.
        Best effort: a process that cannot (threads already running) keeps the warnings."""
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(0x00020000) != 0:  # CLONE_NEWNS
            return
        libc.mount(None, b"/", None, 0x4000 | 0x40000, None)  # MS_REC | MS_PRIVATE: ours only
        lines = ["127.0.0.1 localhost", f"{self.switch_address} {self.switch}"]
        for r in range(self.world):  # and as a dual-stack server sees them (IPv4-mapped)
            lines += [f"{self.address(r)} {self.namespace(r)}",
                      f"::ffff:{self.address(r)} {self.namespace(r)}"]
        path = f"/tmp/{self.name}-{os.getpid()}.hosts"
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        libc.mount(path.encode(), b"/etc/hosts", None, 0x1000, None)  # MS_BIND
        os.unlink(path)  # the bind mount keeps the file's contents alive

    def counters(self, rank: int) -> tuple[int, int]:
        """(bytes sent, bytes received) by rank ``rank``'s NIC, from the kernel's counters
        (headers included)."""
        box: dict = {}

        def read():
            enter(self.namespace(rank))
            with open("/proc/thread-self/net/dev") as f:
                for line in f:
                    if line.strip().startswith(f"{NIC}:"):
                        fields = line.split(":", 1)[1].split()
                        box["out"] = (int(fields[8]), int(fields[0]))
        t = threading.Thread(target=read)
        t.start()
        t.join()
        return box["out"]

    def down(self) -> None:
        """Delete every namespace this cluster made (safe to call twice, or after a failed
        :meth:`up`)."""
        for n in self._made:
            subprocess.run(["ip", "netns", "del", n], capture_output=True)
        self._made = []

    def __enter__(self) -> "KernelCluster":
        return self.up()

    def __exit__(self, *exc) -> None:
        self.down()
