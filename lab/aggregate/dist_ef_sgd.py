"""Dist-EF-SGD: blockwise scaled signs both ways, error feedback on workers and servers.

Zheng, Huang, Kwok, "Communication-Efficient Distributed Blockwise Momentum SGD with
Error-Feedback", NeurIPS 2019 (Alg. 1 dist-EF-SGD, Alg. 2 its blockwise-momentum version).
The compressor C splits a vector into blocks G and sends sign(p_G) with one scale
||p_G||_1 / |G| per block. With worker error e_i and server error e~:

    worker i:  p_i = g_i + e_i,   send C(p_i),   e_i <- p_i - C(p_i)
    server:    p = mean_i C(p_i) + e~,   send C(p),   e~ <- p - C(p)
    all:       x <- x - lr * C(p)

The server is spread over the ranks: rank j serves chunk j of the vector. An alltoall carries
every rank's compressed chunk j to rank j (one uint8 message: the float32 block scales' bytes,
then the packed signs), rank j averages, adds its server error, compresses again, and an
allgather brings the compressed chunks to everyone. Per rank handed to the wire: n / 8 bytes of
signs up (own chunk included) and n / (8 W) down, plus 4 bytes per block; it does not grow
with the world size W.

Departures, all documented choices: errors are kept in gradient units (``lr`` stays in the
optimizer; with a constant rate this equals the paper's rule divided by lr, a changing rate
would need e scaled by lr_old / lr_new). Blocks are ``block_size`` consecutive values inside a
chunk (the paper's blocks are layers: use ``layerwise=True, block_size=None`` for one block per
layer chunk). ``momentum`` > 0 adds Alg. 2's worker-side momentum m <- mu m + g before error
feedback; by default (0) momentum is left to the optimizer.

Peers' messages are checked before they are decoded, against declared wire formats
(:mod:`lab.compress.wire`): the upward message's length (:data:`UP`), then its blocks' signs
and scales, and each server's (signs, scales) coming down (:data:`DOWN`: the scales finite and
>= 0); a mismatch raises :class:`~lab.compress.wire.PayloadError` naming the part.
"""
from __future__ import annotations

import torch

from ..argspec import Arg, takes
from ..compress.base import check_finite
from ..compress.sign import sign_bits, signs_from_bits
from ..compress.wire import Part, WireFormat
from .base import FACTOR, LAYERWISE, Aggregator, register

#: a worker's message to the server of a chunk of n values: the scales' bytes, then the signs
UP = WireFormat(Part("message", torch.uint8, "4 * ceil(n / block) + ceil(n / 8)"),
                where={"block": "block_size, or n for one block per chunk"})
#: a chunk of n values as (signs, scales): what a server sends down, and an UP message split
DOWN = WireFormat(Part("signs", torch.uint8, "ceil(n / 8)"),
                  Part("scales", torch.float32, "ceil(n / block)", "finite >= 0"),
                  where=UP.where)


class _Blocks:
    """What :meth:`WireFormat.check` asks of a codec: the name its errors carry and the names
    its lengths use (``block``, per chunk size)."""
    wire_vars_read_payload = False

    def __init__(self, name: str, block_size: int | None):
        self.name, self.block_size = name, block_size

    def wire_vars(self, numel, ctx, payload) -> dict:
        return {"block": self.block_size or max(numel, 1)}


def block_compress(x: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(packed signs, float32 scales ||x_G||_1 / |G| per block) of float32 ``x``."""
    n = x.numel()
    ids = torch.arange(n, device=x.device) // block
    nb = -(-n // block)
    l1 = torch.zeros(nb, device=x.device).index_add(0, ids, x.abs())
    count = torch.zeros(nb, device=x.device).index_add(0, ids, torch.ones_like(x))
    return sign_bits(x), l1 / count.clamp(min=1)


def block_decompress(signs: torch.Tensor, scales: torch.Tensor, numel: int, block: int):
    ids = torch.arange(numel, device=signs.device) // block
    return signs_from_bits(signs, numel) * scales.float()[ids]


@register("dist_ef_sgd")
@takes(block_size=Arg(int, ge=1, le=2 ** 24, none=True, help="values per scale (None: one "
                                                          "block)"),
       momentum=FACTOR, layerwise=LAYERWISE)
class DistEFSGD(Aggregator):
    name = "dist_ef_sgd"

    def __init__(self, comm, block_size: int | None = 1024, momentum: float = 0.0,
                 layerwise: bool = False):
        super().__init__(comm, None, layerwise)
        self.block_size = block_size
        self.momentum = float(momentum)
        self.worker_error: dict = {}
        self.server_error: dict = {}
        self.velocity: dict = {}
        self._peer = _Blocks(self.name, self.block_size)

    def _check_up(self, message, numel: int) -> tuple[torch.Tensor, torch.Tensor]:
        """A worker's message for ``numel`` values, checked, as (signs, float32 scales)."""
        (message,) = UP.check(self._peer, (message,), numel, torch.float32, None)
        nbytes = 4 * -(-numel // self._block(numel))
        signs, scales = message[nbytes:], message[:nbytes].clone().view(torch.float32)
        return DOWN.check(self._peer, (signs, scales), numel, torch.float32, None)

    def _block(self, numel: int) -> int:
        return self.block_size or max(numel, 1)

    def _state(self, store: dict, key, n: int, device) -> torch.Tensor:
        t = store.get(key)
        return t if t is not None and t.numel() == n else torch.zeros(n, device=device)

    def reduce(self, tensor, key, step):
        check_finite(tensor, self.name)
        g = tensor.detach().reshape(-1).float()
        n, world, rank = g.numel(), self.comm.world_size, self.comm.rank
        if n == 0:
            return tensor.detach().clone()
        if self.momentum:
            v = self.momentum * self._state(self.velocity, key, n, g.device) + g
            self.velocity[key] = g = v
        # worker: error feedback, compress every server's chunk
        p = g + self._state(self.worker_error, key, n, g.device)
        sizes = [c.numel() for c in torch.tensor_split(torch.empty(n), world)]
        sent, decoded = [], []
        for chunk in p.split(sizes):
            signs, scales = block_compress(chunk, self._block(chunk.numel()))
            sent.append(torch.cat([scales.view(torch.uint8), signs]))
            decoded.append(block_decompress(signs, scales, chunk.numel(), self._block(chunk.numel())))
        self.worker_error[key] = p - torch.cat(decoded)
        # server for chunk `rank`: average the workers' messages, error feedback, compress again
        mine = sizes[rank]
        got = self.comm.alltoall(sent, tag="dist_ef:up")
        avg = sum(block_decompress(*self._check_up(m, mine), mine, self._block(mine))
                  for m in got) / world
        ps = avg + self._state(self.server_error, key, mine, g.device)
        signs, scales = block_compress(ps, self._block(mine))
        self.server_error[key] = ps - block_decompress(signs, scales, mine, self._block(mine))
        # everyone: gather the compressed chunks from all servers
        back = self.comm.allgather_payload((signs, scales), tag="dist_ef:down")
        out = torch.cat([block_decompress(*DOWN.check(self._peer, tuple(m), k, torch.float32,
                                                      None), k, self._block(k))
                         for m, k in zip(back, sizes)])
        return out.to(tensor.dtype).view(tensor.shape)
