"""Divergence: a run that blew up stops with an error that says so, and names the rank.

With ``TrainConfig.stop_on_divergence`` (the default) the data-parallel loop checks, on every
rank:

- **the loss**, after each step: non-finite, or grown :data:`GROWTH` times over the rank's
  first loss, raises :class:`Diverged` (``lr=1e6`` no longer ends "successfully" with a loss
  of 9e21). A run that learns, or stalls, or is slowed by an attack, stays far below that
  bound (cross-entropy starts near ``ln(classes)``; 1,000 times it means logits thousands
  apart);
- **what a rank hands to the aggregator**, before it is summed: a NaN or Inf in it raises
  :class:`Diverged` on that rank, naming it, instead of every rank's model turning NaN and a
  peer reporting its loss a step later. A Byzantine rank's message is not checked when the
  aggregator is a robust rule, which drops non-finite vectors by design
  (``lab.aggregate.robust``). Under the ``sync`` schedule the check wraps the attack's
  ``on_gradient`` (what the rank sends, attack or not); the
  overlapping schedules, which send each layer from backward, check each parameter's
  gradient in a hook that runs before theirs.

Nothing here changes a number of a run that does not diverge: the checks only read. The cost
is one reduction over the gradient per step (a sum: finite unless a value is NaN or Inf, or
the values overflow it, which the slow path tells apart); ``python -m lab bench divergence``
style measurements are in the issue note (issue 41): well under 1% of a step.
"""
from __future__ import annotations

import math

import torch

#: A loss this many times the rank's first loss means the run diverged.
GROWTH = 1000.0
#: How to keep a diverging run going.
KEEP = "TrainConfig(stop_on_divergence=False), or --keep-diverging, keeps it running"


class Diverged(FloatingPointError):
    """A run diverged: its loss is non-finite or grew :data:`GROWTH`-fold, or a rank was about
    to send a non-finite gradient. A ``FloatingPointError``, as the other numeric stops are."""


def check_loss(loss: float, first: float, step: int, rank: int, lr: float) -> None:
    """Raise :class:`Diverged` if ``loss`` (this rank's, at ``step``) is non-finite or
    :data:`GROWTH` times ``first`` (its loss at the first step) or more."""
    if not math.isfinite(loss):
        raise Diverged(f"step {step}: loss is {loss} on rank {rank}: the run diverged "
                       f"(lr={lr:g} too large?); {KEEP}")
    if first > 0 and loss >= GROWTH * first:
        raise Diverged(f"step {step}: loss is {loss:.4g} on rank {rank}, {loss / first:.3g} times "
                       f"its first ({first:.4g}): the run diverged (lr={lr:g} too large?); {KEEP}")


def finite(tensors) -> bool:
    """Whether every value of ``tensors`` is finite, at the price of one sum per tensor (a NaN
    or an Inf makes its sum non-finite; finite values may overflow it too, so a full check
    follows only then). One reduction and one scalar read per tensor is the cheapest test
    here: stacking the sums, a norm per tensor or ``isfinite(t).all()`` cost 2 to 10 times as
    much on a CPU."""
    if all(math.isfinite(t.sum().item()) for t in tensors):
        return True
    return all(bool(torch.isfinite(t).all()) for t in tensors)


def _count(tensors) -> tuple[int, int]:
    return (sum(int((~torch.isfinite(t)).sum()) for t in tensors),
            sum(t.numel() for t in tensors))


def robust(aggregator) -> bool:
    """Whether ``aggregator`` drops non-finite vectors itself (the robust rules)."""
    from ..aggregate.robust import RobustAggregator
    return isinstance(aggregator, RobustAggregator)


def message(step: int, rank: int, tensors, engine, what: str) -> str:
    """Why ``tensors`` (``what``: which gradient) stop the run, in words."""
    bad, n = _count(tensors)
    cfg = engine.cfg
    agg = cfg.aggregator_name() if hasattr(cfg, "aggregator_name") else cfg.aggregator
    byz = getattr(engine.attack, "byzantine", False)
    who = (f"Rank {rank} is Byzantine (attack {cfg.attack!r}): a robust aggregator (krum, "
           f"median, trimmed_mean, centered_clip) drops such a gradient" if byz
           else f"The run diverged (lr={cfg.lr:g} too large?)")
    return (f"step {step}: {what} rank {rank} sends is not finite (NaN/Inf in {bad} of {n} "
            f"values), and aggregator {agg!r} would sum it into every rank's model: the run "
            f"stopped before it was summed. {who}. {KEEP}.")


class CheckedSend:
    """The engine's attack, with what this rank hands to the aggregator checked first (the
    ``sync`` schedule calls :meth:`on_gradient` between the aggregator's ``local`` and its
    ``aggregate``). Everything else is the attack's; its state is the attack's state."""

    def __init__(self, engine):
        self.attack, self.engine = engine.attack, engine
        # a robust rule drops a Byzantine rank's NaN by design: that is its experiment
        self.checked = not (getattr(self.attack, "byzantine", False) and robust(engine.aggregator))

    def on_batch(self, x, y, step):
        """The attack's batch, passed through: only what is sent is checked."""
        return self.attack.on_batch(x, y, step)

    def on_gradient(self, grads, step):
        """The attack's gradient, raising :class:`Diverged` if it holds a NaN or an Inf (unless
        a robust aggregator is meant to drop a Byzantine rank's NaN)."""
        out = self.attack.on_gradient(grads, step)
        if self.checked and not finite(out):
            raise Diverged(message(step, self.engine.rank, out, self.engine, "the gradient"))
        return out

    def state_dict(self) -> dict:
        """The attack's state, for a checkpoint (the check itself keeps none)."""
        from .. import state
        return state.state_dict(self.attack)

    def load_state_dict(self, saved: dict) -> None:
        """Restore the attack's state from :meth:`state_dict`'s output."""
        from .. import state
        state.load_state_dict(self.attack, saved)

    def __getattr__(self, name):
        return getattr(self.__dict__["attack"], name)


class Guard:
    """The gradient checks of one rank's run (:func:`install`); ``step`` is set by the loop
    each step, for the message of a per-parameter check."""

    def __init__(self, engine, schedule_name: str):
        self.step = 0
        engine.attack = CheckedSend(engine)
        self.hooks = [] if schedule_name == "sync" else self._each_gradient(engine)

    def _each_gradient(self, engine) -> list:
        """For schedules that send each layer from backward: a hook on every parameter that
        checks its gradient the moment it is accumulated, before the schedule's own hooks
        hand it to the exchange (hooks run in the order they were registered)."""
        def hook(p):
            if p.grad is not None and not finite([p.grad]):
                raise Diverged(message(self.step, engine.rank, [p.grad], engine,
                                       "a gradient (of one parameter)"))
        return [p.register_post_accumulate_grad_hook(hook) for p in engine.params]


def install(engine, schedule_name: str) -> Guard:
    """Install the gradient checks on ``engine``, before its schedule is built: the checked
    send for ``sync``, per-parameter hooks for the overlapping schedules."""
    return Guard(engine, schedule_name)
