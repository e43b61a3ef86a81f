"""Non-identical data across replicas: replica ``r`` of ``R`` draws its part of every batch from
its own contiguous ``1/R`` of the training set (for text, its own stretch of the book), the
setting in which averaging across replicas matters (AsyncMesh, Ajanthan et al., arXiv
2601.22442, trains replicas on different data; SPARTA's and DiLoCo's replicas likewise). With
``shards=False`` every replica takes its slice of one global batch drawn from the whole set.
"""
from __future__ import annotations

import torch


def shard_batch(data, step: int, n: int, replica: int, replicas: int, seed: int = 0):
    """``n`` examples for ``replica`` at ``step``, drawn (with replacement) from its shard."""
    if not (0 <= replica < replicas):
        raise ValueError(f"replica must be in [0, {replicas}), got {replica!r}")
    lo, hi = replica * data.num_train // replicas, (replica + 1) * data.num_train // replicas
    if hi <= lo:
        raise ValueError(f"{replicas} shards of {data.num_train} examples leave replica {replica} none")
    g = torch.Generator().manual_seed((seed * 1_000_003 + step) * 257 + replica)
    idx = torch.randint(lo, hi, (n,), generator=g)
    return data._take(idx, data.x_train, data.y_train)
