"""The point-to-point ops of :class:`~lab.comm.Collective`: send, recv (from one rank or from
whichever sends first), a deadlock-free sendrecv, and the barrier.

A send records its bytes as sent, a receive as received (the sender's ledger counts them as
sent); each goes through :class:`~lab.comm.channel.Channel`'s ``_run``.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from .channel import Channel, _nbytes


class PointToPoint(Channel):
    """Send, recv, recv_any, sendrecv and barrier (a part of :class:`~lab.comm.Collective`)."""

    def send(self, t: torch.Tensor, dst: int, tag: str = "") -> None:
        """Send ``t`` to rank ``dst`` (blocking, matched by its :meth:`recv`); records its bytes."""
        self._check_rank(dst, "dst")
        w = self._wire(t)
        self._run("send", tag, _nbytes(w), lambda: dist.send(w, dst, group=self.group), recv=0,
                  wire=(_nbytes(w), 0))

    def recv(self, t: torch.Tensor, src: int, tag: str = "") -> torch.Tensor:
        """Receive into ``t``; records zero bytes sent (the sender's ledger counts them)."""
        self._check_rank(src, "src")
        w = self._wire(t)
        self._run("recv", tag, 0, lambda: dist.recv(w, src, group=self.group),
                  model_bytes=_nbytes(w), recv=_nbytes(w), wire=(0, _nbytes(w)))
        if w is not t:
            t.copy_(w)
        return t

    def recv_any(self, t: torch.Tensor, tag: str = "") -> int:
        """Receive into ``t`` from whichever rank sends first; returns that rank (a parameter
        server serving workers in arrival order). Ledger as :meth:`recv`."""
        w = self._wire(t)
        src = self._run("recv", tag, 0, lambda: dist.recv(w, None, group=self.group),
                        model_bytes=_nbytes(w), recv=_nbytes(w), wire=(0, _nbytes(w)))
        if w is not t:
            t.copy_(w)
        return int(src) if src is not None else self.rank

    def sendrecv(self, send_t: torch.Tensor, dst: int, recv_t: torch.Tensor, src: int,
                 tag: str = "") -> torch.Tensor:
        """Send ``send_t`` to ``dst`` while receiving ``recv_t`` from ``src`` (no deadlock in
        a ring, where everyone sends and receives at once)."""
        self._check_rank(dst, "dst")
        self._check_rank(src, "src")
        s, r = self._wire(send_t), self._wire(recv_t)

        def go():
            reqs = [dist.isend(s, dst, group=self.group), dist.irecv(r, src, group=self.group)]
            for q in reqs:
                q.wait()
        self._run("send", tag, _nbytes(s), go, recv=_nbytes(r), wire=(_nbytes(s), _nbytes(r)))
        if r is not recv_t:
            recv_t.copy_(r)
        return recv_t

    def barrier(self, tag: str = "") -> None:
        """Wait until every rank has reached this call; records zero bytes."""
        self._run("barrier", tag, 0, lambda: dist.barrier(group=self.group), recv=0, wire=(0, 0))
