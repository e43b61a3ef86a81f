"""Collectives built by hand from point-to-point messages, for teaching and for checking.

``ring_allreduce`` is the bandwidth-optimal ring (Patarasuk & Yuan, JPDC 2009; used by
Horovod, Sergeev & Del Balso 2018): a reduce-scatter of p-1 steps, then an allgather of p-1
steps; each rank sends ``2(p-1)/p * n`` bytes in all, whatever p is.

``ps_push_pull`` is a parameter server in its simplest form (Li et al., OSDI 2014): every
worker pushes its gradient to the server (rank 0), which sums and sends the result back; the
server's link carries ``2(p-1) n`` bytes, which is why one server does not scale.
"""
from __future__ import annotations

import torch

from .collective import Collective


def ring_allreduce(comm: Collective, tensor: torch.Tensor, tag: str = "ring") -> torch.Tensor:
    """Sum ``tensor`` over ranks in place with 2(p-1) neighbour exchanges; returns it."""
    p, r = comm.world_size, comm.rank
    if p == 1:
        return tensor
    flat = tensor.view(-1)
    chunks = list(flat.tensor_split(p))
    right, left = (r + 1) % p, (r - 1) % p
    # reduce-scatter: after step s, chunk (r - s - 1) holds the sum of s + 2 ranks
    for s in range(p - 1):
        send_i, recv_i = (r - s) % p, (r - s - 1) % p
        incoming = torch.empty_like(chunks[recv_i])
        comm.sendrecv(chunks[send_i], right, incoming, left, tag=f"{tag}:reduce-scatter")
        chunks[recv_i] += incoming
    # allgather: pass the finished chunks around the ring
    for s in range(p - 1):
        send_i, recv_i = (r + 1 - s) % p, (r - s) % p
        comm.sendrecv(chunks[send_i], right, chunks[recv_i], left, tag=f"{tag}:allgather")
    return tensor


def ps_push_pull(comm: Collective, grad: torch.Tensor, server: int = 0,
                 tag: str = "ps") -> torch.Tensor:
    """Workers push ``grad`` to ``server``, which sums and pushes the sum back (in place)."""
    p = comm.world_size
    if p == 1:
        return grad
    if comm.rank == server:
        incoming = torch.empty_like(grad)
        for w in range(p):
            if w != server:
                comm.recv(incoming, w, tag=f"{tag}:push")
                grad += incoming
        for w in range(p):
            if w != server:
                comm.send(grad, w, tag=f"{tag}:pull")
    else:
        comm.send(grad, server, tag=f"{tag}:push")
        comm.recv(grad, server, tag=f"{tag}:pull")
    return grad
