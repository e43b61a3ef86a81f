"""The held-out evaluation of a pipeline run's final model, in the caller.

Each rank returns its stage's ``state_dict`` after the last step (``run_rank``). Here, in the
parent process (no communication, outside every ledger), the model is rebuilt from the seed
and split as the ranks split it (:func:`lab.pipeline.stages.split`: the pieces share their
parameters with the model), each piece loads its stage's state from the rank that held it, and
the whole model is scored on the data set's held-out split with the loss and accuracy
``lab.train`` reports as ``test loss`` (:func:`lab.run.build.evaluate`). With several replicas
each replica's model is scored on its own and the *mean over replicas* is reported (replicas
that average sparsely end with different weights; the mean of losses, not the loss of the
mean model).
"""
from __future__ import annotations

import torch

from .. import data as data_mod, models
from ..run.build import evaluate
from .config import PipelineConfig
from .stages import split


def replica_model(cfg: PipelineConfig, ranks: list[dict], replica: int, data=None):
    """The full model of ``replica`` at the end of the run, assembled from its stages' states."""
    data = data if data is not None else data_mod.load(cfg.data, seed=cfg.seed, **cfg.data_kw)
    model = models.make(cfg.model, data, seed=cfg.seed, **cfg.model_kw)
    pieces = split(model, cfg.stages)
    held = {r["stage"]: r for r in ranks if r["replica"] == replica}
    missing = sorted(set(range(cfg.stages)) - set(held))
    if missing:
        raise ValueError(f"replica {replica}: no final state for stage(s) {missing}")
    for s, piece in enumerate(pieces):
        state = held[s].get("state")
        if state is None:
            raise ValueError(f"replica {replica}, stage {s}: the rank returned no 'state'")
        piece.load_state_dict(state)  # strict: a mismatch of keys is an error, never ignored
    return model, data


def final_eval(cfg: PipelineConfig, ranks: list[dict]) -> tuple[float, float]:
    """(held-out loss, held-out accuracy) of the final model, mean over replicas."""
    data = data_mod.load(cfg.data, seed=cfg.seed, **cfg.data_kw)
    losses, accs = [], []
    for rep in range(cfg.replicas):
        model, _ = replica_model(cfg, ranks, rep, data)
        with torch.no_grad():  # the same numbers as lab.train's, without building a graph
            loss, acc = evaluate(model, data, "cpu")
        losses.append(loss)  # a diverged replica's NaN/Inf stays in the mean, seen
        accs.append(acc)
    return sum(losses) / len(losses), sum(accs) / len(accs)
