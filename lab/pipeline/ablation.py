"""AsyncMesh's two corrections, each switched on and off with everything else held fixed, and
each measured against the reference that has nothing to correct (Part 9.5).

**The look-ahead** (pipeline axis; AsyncPP, Ajanthan et al., ICML 2025): the asynchronous
pipeline on ``stages`` stages with AdamW and with NAdamW at the same ``beta1`` (0.99), weight
decay, clipping and schedule (the authors' ``run.bash``). Each optimizer also runs on *one*
stage, where the same asynchronous schedule has no delay at all: its no-delay reference. The
staleness cost of an optimizer is ``loss(stages) - loss(1 stage)``; what the look-ahead
recovers is AdamW's staleness cost minus NAdamW's. NAdamW runs with ``mu_t = beta1`` from the
first update (the look-ahead of its equation: not the authors' regime, in which torch's
``mu_t`` stays below 0.95 for the first 15,406 of their 50,000 updates and averages 0.929) and
with torch's warm-up of ``mu_t`` (the authors' optimizer as it is). These runs do not stash
(``async`` recomputes at the current weights); the comparisons as the authors make them, every
asynchronous run stashing, are :mod:`lab.bench.lookahead`'s, on :mod:`lab.pipeline.emulate`. The
authors' configuration adds weight stashing with recompute (``main_with_runtime.py``:
``load_old_params()`` before each backward pass, ``--recompute``).

**The EMA correction** (data axis; AsyncMesh, arXiv 2601.22442): replicas of one stage each
(the data axis alone) average a fraction of their parameters a step, non-blocking, at delays
``tau``; the late average is merged by overwriting it, by our reading of the EMA correction,
or by the exact local-progress rule it estimates; against the fresh average (``tau = 0``, same
fraction), full synchronous averaging (``rho = 1, tau = 0``) and no averaging.
"""
from __future__ import annotations

import numpy as np

from .config import PipelineConfig
from .loop import train_many

GPT = {"layers": 2, "dim": 32}
#: the authors' settings (``run.bash``): weight decay, per-stage clipping, warm-up + cosine
AUTHORS = dict(weight_decay=0.01, clip=10.0, lr_schedule="cosine")
#: the look-ahead's runs by name: what differs (all at one beta1, 0.99 by default)
LOOKAHEAD = {
    "AdamW": dict(schedule="async", optimizer="adamw"),
    "NAdamW": dict(schedule="async", optimizer="nadamw", mu_schedule="constant"),
    "NAdamW, torch warm-up": dict(schedule="async", optimizer="nadamw"),
    "authors (stash + recompute)": dict(schedule="async-stash", recompute=True,
                                        optimizer="nadamw"),
    "authors, mu = beta1": dict(schedule="async-stash", recompute=True, optimizer="nadamw",
                                mu_schedule="constant"),
}
#: each run's no-delay reference: its optimizer on one stage (no staleness, nothing to stash)
NO_DELAY = {"AdamW": "AdamW", "NAdamW": "NAdamW", "NAdamW, torch warm-up": "NAdamW, torch warm-up",
            "authors (stash + recompute)": "NAdamW, torch warm-up", "authors, mu = beta1": "NAdamW"}


def lookahead_configs(stages: int, steps: int, seed: int = 0, names=tuple(LOOKAHEAD),
                      beta1: float = 0.99, lr: float = 2e-3, model_kw=None,
                      gpipe: bool = False) -> dict[str, PipelineConfig]:
    """The runs ``names`` on a 1-replica pipeline of ``stages`` stages (on one stage: their
    no-delay references, :data:`NO_DELAY`); ``gpipe`` adds the authors' synchronous baseline
    (GPipe, AdamW at 0.9, warm-up over the same steps)."""
    b = dict(model="gpt", data="text", model_kw=dict(model_kw or GPT), stages=stages,
             microbatches=2, steps=steps, batch_size=32, lr=lr, seed=seed, **AUTHORS)
    warm = max(1, steps // 10)  # in steps; the asynchronous schedule updates m = 2 times a step
    if stages == 1:  # nothing is stale, nothing to stash: each optimizer once
        names = list(dict.fromkeys(NO_DELAY[n] for n in names))
    out = {n: PipelineConfig(**b, **LOOKAHEAD[n], beta1=beta1, warmup=2 * warm,
                             label=f"{n} ({stages} stages)") for n in names}
    if gpipe:
        out["GPipe AdamW 0.9"] = PipelineConfig(**b, schedule="gpipe", optimizer="adamw",
                                                warmup=warm, label=f"GPipe AdamW 0.9 ({stages} stages)")
    return out


def ema_configs(steps: int, taus=(1, 4, 8), fraction: float = 0.25,
                rules=(("none", None), ("ema", 0.5), ("ema", 0.9), ("progress", None)),
                seed: int = 0, replicas: int = 4, model_kw=None,
                shards: bool = False) -> dict[tuple, PipelineConfig]:
    """Per (tau, rule, ema): ``replicas`` one-stage replicas averaging ``fraction`` a step,
    non-blocking; and the references ``("fresh",)`` (tau = 0, same fraction), ``("full",)``
    (rho = 1, tau = 0: full synchronous averaging, one allreduce a step) and ``("none",)``."""
    b = dict(model="gpt", data="text", model_kw=dict(model_kw or GPT), stages=1,
             replicas=replicas, microbatches=1, steps=steps, batch_size=32, lr=2e-3, seed=seed,
             shards=shards)
    avg = lambda f, t, **kw: PipelineConfig(**b, dp="sparse-avg",  # noqa: E731
                                            dp_kw={"fraction": f, "delay": t, **kw})
    out = {(t, rule, e): avg(fraction, t, correction=rule, **({} if e is None else {"ema": e}))
           for t in taus for rule, e in rules}
    out["fresh",] = avg(fraction, 0)
    out["full",] = avg(1.0, 0)
    out["none",] = PipelineConfig(**b, dp="none")
    return out


def final(h) -> float:
    """The loss of a run's last tenth of its steps (mean), the book's "final loss"."""
    return float(np.mean(h.loss[-max(1, len(h.loss) // 10):]))


def lookahead(stages: int = 4, steps: int = 100, seeds=(0, 1, 2), momenta=(0.5, 0.9)) -> list[dict]:
    """Per run, beta1 and seed: its final loss on ``stages`` stages, on one (no delay), and the
    staleness cost (the difference); every run of :data:`LOOKAHEAD` at beta1 0.99, AdamW and
    NAdamW (mu_t = beta1) also at ``momenta``."""
    loss = {}
    for S in (stages, 1):
        cfgs = {}
        for s in seeds:
            cfgs.update({(n, 0.9 if n.startswith("GPipe") else 0.99, s): c
                         for n, c in lookahead_configs(S, steps, s, gpipe=S > 1).items()})
            for b1 in momenta:
                cfgs.update({(n, b1, s): c for n, c in lookahead_configs(
                    S, steps, s, ["AdamW", "NAdamW"], beta1=b1).items()})
        for key, h in zip(cfgs, train_many(list(cfgs.values()), progress=False, timeout=3600)):
            loss[(S,) + key] = final(h)
    rows = []
    for (S, n, b1, s), v in loss.items():
        if S > 1:
            ref = loss.get((1, NO_DELAY.get(n, ""), b1, s))
            rows.append({"run": n, "beta1": b1, "seed": s, f"{stages} stages": round(v, 4),
                         "no delay": None if ref is None else round(ref, 4),
                         "staleness cost": None if ref is None else round(v - ref, 4)})
    return rows


def ema_sweep(steps: int = 30, seeds=(0,), **kw) -> list[dict]:
    rows = []
    for s in seeds:
        cfgs = ema_configs(steps, seed=s, **kw)
        for key, h in zip(cfgs, train_many(list(cfgs.values()), progress=False, timeout=900)):
            rows.append({"run": " ".join(str(k) for k in key if k is not None), "seed": s,
                         "final loss": round(float(np.mean(h.loss[-5:])), 4)})
    return rows
