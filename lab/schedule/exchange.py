"""The communication thread's work in the overlap engine (:mod:`lab.schedule.overlap`): one
step's exchange, its emulated link, and each layer's update.

Two ways, by the engine's ``mode``:

- *planned* (a kernel link, a real network, or ``calls="message"``/``"plan"``): real calls
  follow the plan fixed in advance, during backward; on an emulated link each message is booked
  when its call returns (the Collective's clock);
- *emulated* (``calls="head"``, the default on an emulated link, or ``"step"``): the real
  bytes travel after backward in one or two calls of a fixed layout (the first layers' units,
  then the rest); meanwhile the emulated link replays the schedule as its sender would have run
  it: every rank's gradient-ready times are on the board (:mod:`lab.schedule.stamps`) once the
  first call returns, so the thread runs the sender's queue (:func:`~lab.schedule.plan.issue_order`,
  :func:`~lab.schedule.plan.coalesce`) on the *last* rank's ready times, the same on every rank,
  and books each message on a virtual :class:`~lab.comm.network.LinkClock` (up to ``in_flight``
  at once). A P3 slice thus overtakes slices by the ready times this step really had, not by a
  profile taken before training; without a board, by this rank's own.
"""
from __future__ import annotations

import time

import torch

from .plan import coalesce, issue_order

WAIT = 30.0   # seconds a thread waits for a peer's ready times before it uses its own


class Exchange:
    """Mixed into :class:`lab.schedule.overlap.Overlap` (which holds the layers, units, flat
    buffers, clocks, stamps and events)."""

    def _gradient(self, layer: int) -> torch.Tensor:
        """The layer's gradient as one vector: a view of the flat buffer, or a copy."""
        if self.flat is not None:
            a, b = self.flat[1][layer]
            return self.flat[0][a:b]
        return torch.cat([p.grad.reshape(-1) for p in self.layers[layer][1]])

    def _exchange(self, step: int, plan, network) -> None:
        self.comm.ledger.step, self.comm.network = step, network
        self._left_units = [0] * len(self.layers)
        for u in self.units:
            self._left_units[u.layer] += 1
        self._flat: dict = {}
        if network is not None and self.comm.link == "model" and self.mode(network) in ("head", "step"):
            self._exchange_emulated(step, network)
        else:
            self._exchange_planned(step, plan, network)

    def _reduce(self, step: int, units, pieces) -> tuple[torch.Tensor, float, float]:
        """One real call carrying ``units``; ``pieces`` (fraction of the call, ready time) are
        the messages the ledger books (each pays its own latency). Returns the mean, and when
        the call started and ended."""
        for u in units:
            self._until_ready(u.layer)
            if u.layer not in self._flat:
                self._flat[u.layer] = self._gradient(u.layer)
        self.comm.clock.pieces = pieces
        t0 = time.perf_counter()
        span = self._span(units)
        if span is not None:   # end to end in the flat buffer: sent as it lies, no copy
            vec = self.flat[0][span[0]:span[1]]
        else:
            parts = [self._flat[u.layer][u.start:u.stop] for u in units]
            vec = parts[0] if len(parts) == 1 else torch.cat(parts)
        avg = self.engine.aggregator.reduce(vec, (units[0].layer, units[0].start), step)
        now = time.perf_counter()
        self._event("call", len(pieces), t0 - self.origin, now - self.origin)
        return avg, t0, now

    def _span(self, units) -> tuple[int, int] | None:
        """Where ``units`` lie in the flat gradient buffer, if they lie end to end there."""
        if self.flat is None:
            return None
        first = self.flat[1]
        a = at = first[units[0].layer][0] + units[0].start
        for u in units:
            if first[u.layer][0] + u.start != at:
                return None
            at += u.numel
        return a, at

    def _deliver(self, units, avg, end_of=None) -> list:
        """Write each unit's mean back and update every layer whose last unit this was; with
        ``end_of(unit)`` (its emulated delivery) publish each such layer at once, else return
        ``[(unit, layer, update seconds, updated at)]`` for :meth:`_publish`."""
        at, done, span = 0, [], self._span(units)
        if span is not None:
            self.flat[0][span[0]:span[1]].copy_(avg)
        for u in units:
            if span is None:
                self._flat[u.layer][u.start:u.stop].copy_(avg[at:at + u.numel])
                at += u.numel
            self._left_units[u.layer] -= 1
            if self._left_units[u.layer] == 0:
                seconds = self._update(u.layer, self._flat.pop(u.layer))
                if end_of is None:
                    done.append((u, u.layer, seconds, time.perf_counter()))
                else:
                    self._publish(u.layer, end_of(u) + seconds)
        return done

    # -- planned: real calls as the plan says ---------------------------------------------
    def _exchange_planned(self, step: int, plan, network) -> None:
        msgs, calls = plan
        clock = self.comm.clock
        self.messages, self.n_calls = len(msgs), len(calls)
        for call in calls:
            units = [self.units[i] for k in call for i in msgs[k]]
            total = sum(u.numel for u in units)
            for u in units:
                self._until_ready(u.layer)
            free = clock.free
            pieces = [(sum(self.units[i].numel for i in msgs[k]) / total,
                       max(self.ready_t[self.units[i].layer] for i in msgs[k])) for k in call]
            avg, t0, now = self._reduce(step, units, pieces)
            if network is not None:   # the clock booked each message (kernel: its latency)
                got = clock.spans
                self.link_busy += max(0.0, got[-1][1] - max(got[0][0], free))
            else:
                got = [(t0, now)] * len(call)
            end = {}
            for k, (start, stop) in zip(call, got):
                stop = max(stop, now)
                self._event("send", sum(self.units[i].numel for i in msgs[k]),
                            start - self.origin, stop - self.origin)
                for i in msgs[k]:
                    end[i] = stop
                    u = self.units[i]
                    self._event("comm", u.layer, u.start, start - self.origin, stop - self.origin)
            self._deliver(units, avg, lambda u, e=end, idx=self._index: e[idx[u]])
            self.thread_s += time.perf_counter() - t0

    # -- emulated: the link replays the sender on this step's ready times ------------------
    def _exchange_emulated(self, step: int, network) -> None:
        head = [i for i, u in enumerate(self.units) if u.layer < self.n_head]
        rest = [i for i, u in enumerate(self.units) if u.layer >= self.n_head]
        groups = [g for g in ([head, rest] if self.mode(network) == "head" else [head + rest]) if g]
        self.n_calls = len(groups)
        for layer in range(len(self.layers)):
            self._until_ready(layer)
        ends, msgs = self._replay(step, network)   # waits for every rank's ready times
        owner = {i: n for n, g in enumerate(groups) for i in g}
        for n, group in enumerate(groups):
            units = [self.units[i] for i in group]
            # the ledger books each of this call's messages, with its own latency
            total = sum(u.numel for u in units)
            pieces = [(sum(self.units[i].numel for i in m) / total, 0.0)
                      for m in msgs if owner[m[0]] == n]
            avg, t0, now = self._reduce(step, units, pieces)
            self._rate_of(self.comm.ledger.records[-8:], total)
            self._deliver(units, avg, lambda u: max(ends[self._index[u]], now))
            self.thread_s += time.perf_counter() - t0

    def _replay(self, step: int, network) -> tuple[dict, int]:
        """Run the sender on this step's last-rank ready times (waiting for every rank's to be
        posted) and book every message on the emulated link: it starts when its layers are
        ready and fewer than ``in_flight`` messages are on the wire; its latency overlaps the
        bytes before it, its bytes queue behind theirs (the model of
        :class:`~lab.comm.network.LinkClock`). Returns each unit's delivery time and the
        number of messages (the ledger books each message's latency)."""
        ready = []
        for layer in range(len(self.layers)):
            last = self.stamps.last(step, layer, WAIT) if self.stamps is not None else None
            ready.append(self.ready_t[layer] if last is None else last)
        self._event("last", max(ready) - self.origin)   # the last rank's backward ended
        key = (network, self._rate)
        if key not in self._costs:   # the cost model is linear in bytes for a given op and p
            op, per_value = self._rate
            p = self.engine.world_size
            lat = network.time(op, 0, p)
            per_byte = (network.time(op, 1e6, p) - lat) / 1e6
            self._costs[key] = (lat, per_byte * per_value,
                                [lat + per_byte * per_value * u.numel for u in self.units])
        lat, per_value, xfer = self._costs[key]
        order = issue_order(self.units, ready, xfer, self.priority)
        msgs = []   # a message never spans two real calls: split where it would
        for m in coalesce(self.units, order, ready, xfer, self.coalesce):
            for i in m:   # in the message's own order, a new message where the call changes
                if i == m[0] or (self.units[i].layer < self.n_head) != head:
                    msgs.append([])
                head = self.units[i].layer < self.n_head
                msgs[-1].append(i)
        self.messages = len(msgs)
        k, ends, free, end = self.in_flight, self._ends, self._free, {}
        for m in msgs:
            values = sum(self.units[i].numel for i in m)
            go = max(ready[self.units[i].layer] for i in m)
            t = lat + per_value * values
            start = max(go, ends[-k]) if len(ends) >= k else go
            stop = max(start + t, free + t - min(lat, t))
            self.link_busy += max(0.0, stop - max(start, free))
            free = stop
            ends.append(stop)
            for i in m:
                end[i] = stop
            if self.timeline:
                self._event("send", values, start - self.origin, stop - self.origin)
                for i in m:
                    self._event("comm", self.units[i].layer, self.units[i].start,
                                start - self.origin, stop - self.origin)
        self._free, self._ends = free, ends[-k:]
        return end, msgs

    # -- shared ---------------------------------------------------------------------------
    def _rate_of(self, records, values: int) -> None:
        """The op and bytes per value of a real call (a codec's payload: fp16 is 2 bytes): what
        the emulated link charges its messages."""
        data = [r for r in records if r.step == self.comm.ledger.step and r.bytes]
        if data and values:
            big = max(data, key=lambda r: r.bytes)
            self._rate = (big.op, sum(r.bytes for r in data if r.op == big.op) / values)

    def _update(self, layer: int, avg: torch.Tensor) -> float:
        """The layer's optimizer step on its mean gradient; returns its seconds."""
        t0 = time.perf_counter()
        ps = self.layers[layer][1]
        if self.flat is None:   # else the mean is already in the parameters' .grad
            for p, g in zip(ps, avg.split([p.numel() for p in ps])):
                p.grad.copy_(g.view_as(p))
        self.opts[layer].step()
        return time.perf_counter() - t0

    def _publish(self, layer: int, at: float) -> None:
        """The layer is available at ``at`` (its delivery plus its update), or now if later:
        on the emulated link the update can only start when the bytes are delivered."""
        self.avail_t[layer] = max(at, time.perf_counter())
        self.applied[layer].set()
        self._event("applied", layer, self.avail_t[layer] - self.origin)
