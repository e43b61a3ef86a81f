"""The transport of ``p3-ps`` (:mod:`lab.sync.p3_server`, where the algorithm and its reading of
the authors' ps-lite are described): the key header, a thread's own Collective on a virtual link
clock, the priority queue one sending thread drains, the threads that surface their errors, and
:class:`_Role`, a rank's links with the send and receive of one slice that both roles share.
"""
from __future__ import annotations

import copy
import heapq
import itertools
import threading
import time

import torch

from ..comm import Collective, CommLedger
from ..comm.network import LinkClock

KEY = 3              # header values (float64): [key, step, link start]; key -1: stop
KEY_BYTES = 8 * KEY


def _link(comm: Collective, clock: bool) -> Collective:
    """A thread's own Collective: same group and ledger records, its own step stamp; with a
    virtual link clock (a payload's link), or with no emulated time (a key header)."""
    c = copy.copy(comm)
    c.ledger = CommLedger(records=comm.ledger.records)
    c.clock = LinkClock() if clock else None
    if not clock:
        c.network = None
    return c


def _until(t: float) -> None:
    left = t - time.perf_counter()
    if left > 0:
        time.sleep(left)


class _Queue:
    """A priority queue one thread drains: ``get`` blocks until an item or ``close``."""

    def __init__(self, priority: bool):
        self.priority, self.heap, self.seq = priority, [], itertools.count()
        self.cond, self.closed = threading.Condition(), False

    def put(self, key: int, item) -> None:
        with self.cond:  # by key (forward order) if priority, else first in, first out
            seq = next(self.seq)
            heapq.heappush(self.heap, ((key if self.priority else seq), seq, key, item))
            self.cond.notify()

    def get(self):
        """``(item, seq, waiting)``: the next item, its arrival number and the keys still
        queued behind it (what a test checks the order against); None once closed and empty."""
        with self.cond:
            while not self.heap and not self.closed:
                self.cond.wait()
            if not self.heap:
                return None
            _, seq, _, item = heapq.heappop(self.heap)
            return item, seq, [e[2] for e in self.heap]

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify()


def _thread(target, errors: list, on_error=None) -> threading.Thread:
    def run():
        try:
            target()
        except BaseException as exc:  # surfaced by the main thread
            errors.append(exc)
            if on_error is not None:
                on_error()
    t = threading.Thread(target=run, daemon=True, name=f"lab-{target.__name__}")
    t.start()
    return t


POLL = 0.05   # seconds between checks for a failed thread while a forward waits for a layer


class _Gated:
    """A worker's forward hooks: a layer's forward waits until its updated parameters are in
    (``self.avail[layer]``), checking every :data:`POLL` seconds for a failed thread."""

    def _before(self, layers):
        def hook(_module, _inputs):
            for layer in layers:
                self._wait(layer)
        return hook

    def _wait(self, layer: int) -> None:
        t0 = time.perf_counter()
        while not self.avail[layer].wait(POLL):
            if self.errors:
                break
        self._raise()
        self.waited += time.perf_counter() - t0


class _Role:
    def __init__(self, ctx, cfg, e, comm, layers, sites, units, home, mode):
        self.ctx, self.cfg, self.e, self.layers, self.sites = ctx, cfg, e, layers, sites
        self.units, self.home, self.mode = units, home, mode
        self.S, self.n = mode.servers, ctx.world_size - mode.servers
        self.errors: list = []
        # one Collective per thread (its own step stamp): the uplink on the sending thread,
        # the downlink on the receiving one, each a virtual clock; headers without emulated time
        self.up, self.down = _link(comm, True), _link(comm, True)
        self.up_key, self.down_key = _link(comm, False), _link(comm, False)
        self.sendq = _Queue(mode.priority)

    def _send(self, key: int, step: int, payload: torch.Tensor, dst: int, tag: str,
              ready: float) -> None:
        """Send one slice, ready to go at ``ready`` (perf_counter seconds), then sleep until
        the emulated uplink has carried it. The link's timeline is virtual: a late wake-up
        delays the real send, not the next message's start on the link."""
        up = self.up
        up.ledger.step = self.up_key.ledger.step = step
        up.network = self.cfg.network_at(step)
        up.clock.issue = ready
        start = max(ready, up.clock.free)    # when this message starts on the emulated uplink
        head = torch.tensor([float(key), float(step), start], dtype=torch.float64)
        self.up_key.send(head, dst, tag=f"{tag}-key")
        up.send(payload, dst, tag=tag)
        if up.network is not None:
            _until(up.clock.spans[-1][1])

    def _recv_header(self, hdr: torch.Tensor, tag: str) -> tuple[int, int, int]:
        src = self.down_key.recv_any(hdr, tag=f"{tag}-key")
        key, step = int(hdr[0]), int(hdr[1])
        self.down.ledger.step = step
        self.down.network = self.cfg.network_at(max(step, 0))
        self.down.clock.issue = float(hdr[2])  # on the downlink no earlier than it left
        return src, key, step

    def _recv(self, buf: torch.Tensor, src: int, tag: str) -> float:
        """Receive a slice; sleep until the emulated downlink has delivered it; returns that
        time (perf_counter seconds)."""
        self.down.recv(buf, src, tag=tag)
        if self.down.network is None:
            return time.perf_counter()
        end = self.down.clock.spans[-1][1]
        _until(end)
        return end

    def _raise(self) -> None:
        if self.errors:
            raise RuntimeError(f"rank {self.ctx.rank}: a p3-ps communication thread failed") \
                from self.errors[0]
