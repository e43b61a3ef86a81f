"""The (replica, stage) mesh of ranks, and its two kinds of communication over ``lab.comm``.

Global rank ``r * stages + s`` is stage ``s`` of replica ``r``. Along the pipeline axis a
stage sends activations to ``s + 1`` and gradients to ``s - 1`` with ``Collective.send/recv``
on the world group; along the data axis the ranks holding the same stage form one process
group (``Collective(group=...)``) for averaging, on its own emulated link (``dp_network``: the
replicas may sit far apart while the stages of one replica sit close, or the other way round).
Every byte lands in a ledger. On a kernel link (``PipelineConfig(link="kernel")``) each rank's
one NIC is shaped to ``network``'s rate, so the replica axis may differ in latency only.

Sends are handed to a :class:`Sender` thread per neighbour (links are full duplex), so a stage
computes while its output is on the wire (a real pipeline overlaps both) and two neighbours
that send to each other at the same moment cannot deadlock. The thread never swallows a
failure: the main thread re-raises it at its next send or flush, and ``lab.launch`` ends every
rank.
"""
from __future__ import annotations

import queue
import threading
import time

import torch
import torch.distributed as dist

from ..comm import Collective, CommLedger, Network


class Sender:
    """A link to one neighbour: a thread that sends what is queued, in order. On an emulated
    network a message is held for its modeled transfer time before it goes (store and
    forward), so the receiver sees the link's latency and bandwidth, and the link carries one
    message at a time while the stage goes on computing. On a kernel link (``lab.comm.kernel``)
    it is held for the latency alone: the shaped NIC takes the bytes' time for real."""

    def __init__(self, network):
        self.network = Network.parse(network)
        self.comm = Collective(ledger=CommLedger())  # its own ledger: its own thread
        self.busy_s: dict[int, float] = {}
        self.q: queue.Queue = queue.Queue()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True, name="lab-pipeline-send")
        self.thread.start()

    def _run(self):
        while True:
            item = self.q.get()
            try:
                if item is None:
                    return
                t, dst, tag, step = item
                if self.error is None:
                    t0 = time.perf_counter()
                    nbytes = t.numel() * t.element_size()
                    modeled = self.network.time("send", nbytes, 2) if self.network else 0.0
                    kernel = self.comm.link == "kernel"  # the kernel cannot delay: hold the latency
                    time.sleep(self.network.time("send", 0, 2) if kernel and self.network else modeled)
                    self.comm.ledger.step = step
                    self.comm.send(t, dst, tag)
                    led = self.comm.ledger.records
                    led[-1] = led[-1]._replace(modeled=modeled, seconds=time.perf_counter() - t0)
                    self.busy_s[step] = self.busy_s.get(step, 0.0) + time.perf_counter() - t0
            except BaseException as e:  # noqa: BLE001 -- handed to the main thread
                self.error = e
            finally:
                self.q.task_done()

    def send(self, t: torch.Tensor, dst: int, tag: str, step: int) -> None:
        self._check()
        self.q.put((t.detach().contiguous().clone(), dst, tag, step))

    def flush(self) -> None:
        """Wait until everything queued is on the wire."""
        while self.q.unfinished_tasks:
            self._check()
            time.sleep(0.0005)
        self._check()

    def close(self) -> None:
        self.flush()
        self.q.put(None)
        self.thread.join()

    def _check(self):
        if self.error is not None:
            raise RuntimeError(f"pipeline send failed: {self.error!r}") from self.error


class Mesh:
    """Coordinates of this rank, its pipeline neighbours, and the replica-axis collective."""

    def __init__(self, rank: int, world_size: int, stages: int, replicas: int, network=None,
                 ledger: CommLedger | None = None, dp_network=None):
        if stages * replicas != world_size:
            raise ValueError(f"stages x replicas ({stages} x {replicas}) must equal the world "
                             f"size ({world_size})")
        self.rank, self.stages, self.replicas = rank, stages, replicas
        self.replica, self.stage = divmod(rank, stages)
        self.prev = rank - 1 if self.stage > 0 else None
        self.next = rank + 1 if self.stage < stages - 1 else None
        self.ledger = ledger if ledger is not None else CommLedger()
        self.pp = Collective(ledger=self.ledger)  # receives: the wait is real, the link is the sender's
        group = None
        if replicas > 1 and dist.is_initialized():
            for s in range(stages):  # every rank creates every group, in the same order
                g = dist.new_group([r * stages + s for r in range(replicas)])
                if s == self.stage:
                    group = g
        dp_net = network if dp_network is None else dp_network
        if self.pp.link == "kernel" and network is not None:
            Collective(network=network)  # made on a kernel link: shapes this rank's NIC to its rate
        self.dp = Collective(group=group, ledger=self.ledger, network=dp_net) if group else None
        self.links = {n: Sender(network) for n in (self.prev, self.next) if n is not None}
        self.send_ledgers = [link.comm.ledger for link in self.links.values()]

    def send(self, t: torch.Tensor, dst: int, tag: str, step: int) -> None:
        self.links[dst].send(t, dst, tag, step)

    def close(self) -> None:
        for link in self.links.values():
            link.close()

    def send_seconds(self, step: int) -> float:
        return sum(link.busy_s.get(step, 0.0) for link in self.links.values())

    @property
    def first(self) -> bool:
        return self.stage == 0

    @property
    def last(self) -> bool:
        return self.stage == self.stages - 1

    def records(self):
        """Every ledger record of this rank: receives and averaging, then sends."""
        return self.ledger.records + [r for led in self.send_ledgers for r in led.records]
