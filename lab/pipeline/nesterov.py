"""The Nesterov look-ahead for asynchronous pipelines (AsyncPP: Ajanthan, Ramasinghe, Zuo,
Avraham, Long, "Nesterov Method for Asynchronous Pipeline Parallel Optimization", ICML 2025,
arXiv 2505.01099).

Nesterov's method evaluates the gradient at a look-ahead point along the momentum,
``v_{t+1} = mu v_t - lr grad f(x_t + mu v_t)``, ``x_{t+1} = x_t + v_{t+1}``. AsyncPP modifies
the look-ahead so that a gradient that arrives ``tau`` updates late still points the right
way: with a momentum close to one the weights keep moving along the momentum while the
gradient is in flight. Our reading, following the authors' public code (``optim/nadamw.py``:
torch's NAdam, ``betas=(0.99, 0.999)``, ``momentum_decay`` 0.004): NAdam (Dozat, ICLR 2016
workshop, Algorithm 2: Adam with the look-ahead folded into the update) applied to the delayed
gradient ``g``, with ``m_t = beta1 m_{t-1} + (1 - beta1) g_t`` and

    x_{t+1} = x_t - lr [ (1 - mu_t) / (1 - prod_{i<=t} mu_i) g_t
                        + mu_{t+1} / (1 - prod_{i<=t+1} mu_i) m_t ] / (sqrt(v_hat_t) + eps)

torch (and so the authors) *warm* ``mu_t`` up: ``mu_t = beta1 (1 - 0.5 * 0.96^(psi t))`` with
``psi = 0.004`` (Dozat's schedule), about ``beta1 / 2`` for the first hundred updates and
``beta1`` only after tens of thousands: at ``beta1 = 0.99`` ``mu_t`` stays below 0.95 for the
first 15,407 updates and averages 0.929 over the authors' 50,000 (:func:`mu`; Part 9.5 computes
both). ``mu_schedule="constant"`` is the look-ahead of the equation from the first update,
``mu_t = beta1`` (torch's NAdam with ``psi`` so large that ``0.96^(psi t)`` is 0 for every
``t >= 1``): not the authors' regime, a bound on it. ``"compressed"`` is the authors' schedule
squeezed into a run of ``U`` updates, ``psi = 0.004 x 50,000 / U``, so that ``mu_t`` passes
through the same values at the same fraction of the run as in their 50,000 updates. Optionally the PipeMare
learning-rate correction (Yang et al., MLSys 2021, Sec. 3.1) ``lr_t = lr / tau^(1 - min(t/T, 1))``
that starts at ``lr / tau`` on a stage of delay ``tau`` and warms up to ``lr`` over ``T`` updates.
"""
from __future__ import annotations

import torch

#: NAdam's mu_t: torch's warm-up (the authors' runs), or beta1 from the first update
MU_SCHEDULES = ("warmup", "constant", "compressed")
#: torch's ``momentum_decay`` psi per schedule: 0.96^(1e6 t) underflows to 0.0 for t >= 1
PSI = {"warmup": 4e-3, "constant": 1e6}
#: the authors' run length in updates (AsyncPP, Sec. 5): what "compressed" squeezes into a run
AUTHORS_UPDATES = 50_000


def psi(mu_schedule: str, updates: int | None = None) -> float:
    """torch's ``momentum_decay`` for ``mu_schedule``; ``"compressed"`` needs the run's ``updates``."""
    if mu_schedule not in MU_SCHEDULES:
        raise ValueError(f"mu_schedule must be one of {MU_SCHEDULES}, got {mu_schedule!r}")
    if mu_schedule != "compressed":
        return PSI[mu_schedule]
    if not (isinstance(updates, int) and updates >= 1):
        raise ValueError(f"mu_schedule='compressed' needs updates (the run's), an int >= 1, "
                         f"got {updates!r}")
    return PSI["warmup"] * AUTHORS_UPDATES / updates


def check_kw(momentum: float = 0.99, lr_correction: int = 0) -> None:
    if not 0.0 <= momentum < 1.0:
        raise ValueError(f"schedule_kw momentum must be in [0, 1), got {momentum!r}")
    if not (isinstance(lr_correction, int) and lr_correction >= 0):
        raise ValueError(f"schedule_kw lr_correction (warm-up updates T, 0 = off) must be an "
                         f"int >= 0, got {lr_correction!r}")


def mu(t, beta1: float, mu_schedule: str = "warmup", updates: int | None = None):
    """NAdam's momentum coefficient ``mu_t`` at update ``t`` (1-based; an array too), as torch
    computes it."""
    return beta1 * (1.0 - 0.5 * 0.96 ** (t * psi(mu_schedule, updates)))


def nadam(params, lr: float, beta1: float, weight_decay: float = 0.0, decoupled: bool = True,
          mu_schedule: str = "warmup", updates: int | None = None) -> torch.optim.NAdam:
    """torch's NAdam at ``beta1`` with ``mu_schedule``'s ``mu_t`` (a run of ``updates``
    updates, for "compressed"); decoupled decay is NAdamW."""
    return torch.optim.NAdam(params, lr=lr, betas=(beta1, 0.999), weight_decay=weight_decay,
                             decoupled_weight_decay=decoupled,
                             momentum_decay=psi(mu_schedule, updates))


def lookahead_optimizer(params, lr: float, momentum: float = 0.99, lr_correction: int = 0,
                        weight_decay: float = 0.0, mu_schedule: str = "warmup",
                        updates: int | None = None):
    """NAdam with ``beta1 = momentum``; with ``weight_decay`` the decay is decoupled (NAdamW,
    as the authors' ``optim/nadamw.py``)."""
    check_kw(momentum, lr_correction)
    return nadam(params, lr, momentum, weight_decay, weight_decay > 0, mu_schedule, updates)


def corrected_lr(lr: float, delay: int, update: int, warmup: int) -> float:
    """PipeMare's ``lr / tau^(1 - min(t/T, 1))`` (``lr`` itself when ``warmup`` is 0)."""
    if warmup <= 0 or delay <= 1:
        return lr
    return lr / delay ** (1.0 - min(update / warmup, 1.0))
