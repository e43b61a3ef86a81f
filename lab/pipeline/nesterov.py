"""The Nesterov look-ahead for asynchronous pipelines (AsyncPP: Ajanthan, Ramasinghe, Zuo,
Avraham, Long, "Nesterov Method for Asynchronous Pipeline Parallel Optimization", ICML 2025,
arXiv 2505.01099).

Nesterov's method evaluates the gradient at a look-ahead point along the momentum,
``v_{t+1} = mu v_t - lr grad f(x_t + mu v_t)``, ``x_{t+1} = x_t + v_{t+1}``. AsyncPP modifies
the look-ahead so that a gradient that arrives ``tau`` updates late still points the right
way: with a momentum close to one the weights keep moving along the momentum while the
gradient is in flight, so the look-ahead step extrapolates where the weights will be. Our
reading, following the authors' public code: NAdam (Dozat, ICLR 2016 workshop: Adam with the
Nesterov look-ahead folded into the update) with ``beta1 = momentum = 0.99``, applied to the
delayed gradient; optionally the PipeMare learning-rate correction (Yang et al., MLSys 2021,
Sec. 3.1) ``lr_t = lr / tau^(1 - min(t / T, 1))`` that starts at ``lr / tau`` on a stage of
delay ``tau`` and warms up to ``lr`` over ``T`` updates.
"""
from __future__ import annotations

import torch


def check_kw(momentum: float = 0.99, lr_correction: int = 0) -> None:
    if not 0.0 <= momentum < 1.0:
        raise ValueError(f"schedule_kw momentum must be in [0, 1), got {momentum!r}")
    if not (isinstance(lr_correction, int) and lr_correction >= 0):
        raise ValueError(f"schedule_kw lr_correction (warm-up updates T, 0 = off) must be an "
                         f"int >= 0, got {lr_correction!r}")


def lookahead_optimizer(params, lr: float, momentum: float = 0.99, lr_correction: int = 0,
                        weight_decay: float = 0.0):
    """NAdam with ``beta1 = momentum``; with ``weight_decay`` the decay is decoupled (NAdamW,
    as the authors' ``optim/nadamw.py``)."""
    check_kw(momentum, lr_correction)
    return torch.optim.NAdam(params, lr=lr, betas=(momentum, 0.999), weight_decay=weight_decay,
                             decoupled_weight_decay=weight_decay > 0)


def corrected_lr(lr: float, delay: int, update: int, warmup: int) -> float:
    """PipeMare's ``lr / tau^(1 - min(t/T, 1))`` (``lr`` itself when ``warmup`` is 0)."""
    if warmup <= 0 or delay <= 1:
        return lr
    return lr / delay ** (1.0 - min(update / warmup, 1.0))
