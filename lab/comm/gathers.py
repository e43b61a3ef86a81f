"""The gathering ops of :class:`~lab.comm.Collective`: allgather (ragged sizes allowed), a codec
payload's allgather, reduce-scatter and all-to-all.

Each is one data call through :class:`~lab.comm.channel.Channel`'s ``_run``, recorded in the
ledger; sizes that may differ between ranks are exchanged first, in a small call of their own
(tagged ``TAG:sizes``). In a world of one every op returns (a copy of) its input and records
zero bytes.
"""
from __future__ import annotations

from typing import Sequence

import torch
import torch.distributed as dist

from .channel import Channel, _nbytes


class Gathers(Channel):
    """Allgather, payload allgather, reduce-scatter and all-to-all (a part of
    :class:`~lab.comm.Collective`)."""

    def allgather(self, t: torch.Tensor, tag: str = "", same_size: bool = False) -> list[torch.Tensor]:
        """Gather ``t`` from every rank. Sizes along dim 0 may differ (ragged) unless
        ``same_size``; ragged gathers first exchange sizes, then pad to the largest."""
        w = self._wire(t)
        if self.world_size == 1:
            self._run("allgather", tag, 0, lambda: None)
            return [t.clone()]
        if same_size:
            outs = [torch.empty_like(w) for _ in range(self.world_size)]
            self._run("allgather", tag, _nbytes(w),
                      lambda: dist.all_gather(outs, w, group=self.group), sync=w,
                      recv=(self.world_size - 1) * _nbytes(w))
            return [o.to(t.device) for o in outs]
        sizes = self._gather_sizes([w.shape[0] if w.dim() else 1], tag)
        w = w.reshape(-1, *w.shape[1:]) if w.dim() else w.reshape(1)
        longest = int(sizes.max())
        pad = torch.zeros((longest - w.shape[0], *w.shape[1:]), dtype=w.dtype, device=w.device)
        padded = torch.cat([w, pad]) if pad.shape[0] else w
        outs = [torch.empty_like(padded) for _ in range(self.world_size)]
        self._run("allgather", tag, _nbytes(padded),
                  lambda: dist.all_gather(outs, padded, group=self.group), sync=padded,
                  recv=(self.world_size - 1) * _nbytes(padded))
        return [o[: int(n)].to(t.device) for o, n in zip(outs, sizes[:, 0])]

    def allgather_payload(self, payload: Sequence[torch.Tensor], tag: str = "",
                          same_size: bool = False) -> list[tuple]:
        """Allgather a codec payload (a tuple of tensors of any dtypes and sizes) in one data
        call: the parts are laid end to end as bytes. A small size exchange comes first,
        unless ``same_size`` says every rank's parts have this rank's sizes."""
        parts = [self._wire(p).reshape(-1) for p in payload]
        lengths = [_nbytes(p) for p in parts]
        if self.world_size == 1:
            self._run("allgather", tag, 0, lambda: None)
            return [tuple(p.clone() for p in payload)]
        if same_size:
            sizes = torch.tensor([lengths] * self.world_size, dtype=torch.int64)
        else:
            sizes = self._gather_sizes(lengths, tag)  # (world, parts) in bytes
        buf = torch.cat([p.view(torch.uint8) for p in parts]) if parts else torch.zeros(0, dtype=torch.uint8)
        longest = int(sizes.sum(dim=1).max())
        padded = torch.cat([buf, buf.new_zeros(longest - buf.numel())])
        outs = [torch.empty_like(padded) for _ in range(self.world_size)]
        self._run("allgather", tag, _nbytes(padded),
                  lambda: dist.all_gather(outs, padded, group=self.group), sync=padded,
                  recv=(self.world_size - 1) * _nbytes(padded))
        result = []
        for out, row in zip(outs, sizes.tolist()):
            pieces, at = [], 0
            for p, n in zip(parts, row):
                pieces.append(out[at: at + n].clone().view(p.dtype).to(payload[0].device))
                at += n
            result.append(tuple(pieces))
        return result

    def reduce_scatter(self, t: torch.Tensor, tag: str = "") -> torch.Tensor:
        """Sum ``t`` across ranks and return this rank's chunk (``torch.tensor_split`` into
        ``world_size`` nearly equal chunks along dim 0)."""
        chunks = list(torch.tensor_split(self._wire(t), self.world_size))
        if self.world_size == 1:
            self._run("reduce_scatter", tag, 0, lambda: None)
            return chunks[0].clone()
        longest = max(c.shape[0] for c in chunks)
        padded = [torch.cat([c, c.new_zeros((longest - c.shape[0], *c.shape[1:]))]) for c in chunks]
        out = torch.empty_like(padded[0])
        total = sum(_nbytes(p) for p in padded)
        if self.backend == "gloo":
            # gloo has no reduce_scatter: allreduce the padded stack, keep our chunk. The
            # ledger still records reduce-scatter bytes and the modeled time of one.
            stack = torch.stack(padded)
            self._run("reduce_scatter", tag, total,
                      lambda: dist.all_reduce(stack, group=self.group), sync=stack,
                      recv=_nbytes(padded[self.rank]))
            out = stack[self.rank]
        else:
            self._run("reduce_scatter", tag, total,
                      lambda: dist.reduce_scatter(out, padded, group=self.group), sync=out,
                      recv=_nbytes(padded[self.rank]))
        return out[: chunks[self.rank].shape[0]].to(t.device)

    def alltoall(self, chunks: Sequence[torch.Tensor], tag: str = "") -> list[torch.Tensor]:
        """Send ``chunks[j]`` (1-D, any lengths, one dtype) to rank ``j``; return the chunks
        received, by source rank. Lengths are exchanged first, so they may differ."""
        if len(chunks) != self.world_size:
            raise ValueError(f"chunks must have one tensor per rank ({self.world_size}), got {len(chunks)}")
        send = [self._wire(c).reshape(-1) for c in chunks]
        if self.world_size == 1:
            self._run("alltoall", tag, 0, lambda: None)
            return [send[0].clone()]
        lens = torch.tensor([c.numel() for c in send], dtype=torch.int64)
        got = torch.empty_like(lens)
        if self.backend == "nccl":
            lens, got = lens.cuda(), got.cuda()
        self._run("alltoall", f"{tag}:sizes", _nbytes(lens),
                  lambda: dist.all_to_all_single(got, lens, group=self.group),
                  recv=(self.world_size - 1) * 8,
                  wire=((self.world_size - 1) * 8, (self.world_size - 1) * 8))
        in_sizes, out_sizes = lens.tolist(), got.tolist()
        flat_in = torch.cat(send)
        flat_out = flat_in.new_empty(sum(out_sizes))
        from_others = sum(n for j, n in enumerate(out_sizes) if j != self.rank)
        to_others = sum(n for j, n in enumerate(in_sizes) if j != self.rank)
        size = flat_in.element_size()
        self._run("alltoall", tag, _nbytes(flat_in),
                  lambda: dist.all_to_all_single(flat_out, flat_in, out_sizes, in_sizes,
                                                 group=self.group), sync=flat_in,
                  recv=from_others * size, wire=(to_others * size, from_others * size))
        # clones, not views into one buffer: a chunk may be re-viewed as another dtype
        return [o.clone().to(chunks[0].device) for o in flat_out.split(out_sizes)]
