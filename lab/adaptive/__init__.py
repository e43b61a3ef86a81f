"""Adaptive communication (Part 8): AR-Topk's leader choice, collective switching by the
alpha-beta model, and the multi-objective controller over the density.

Tyagi & Swany, "Flexible Communication for Optimal Distributed Learning over Unpredictable
Networks", IEEE BigData 2023 (arXiv 2312.02493); the authors' code is sahiltyagi4/ARTopk
(``flexible_compression/``). One idea per module:

- ``leader``: who picks the shared indices (STAR round-robin, VAR largest smoothed norm)
- ``switching``: modeled cost of each way to exchange a Top-k gradient, and the cheapest
- ``moo``: compression gain, curve fits, NSGA-II and the ASF pick (or an exact search), and
  when to re-decide
- ``evidence``: which exchange a step ran, read from its ledger traffic
- ``schedule``: the authors' twelve-phase changing network, rescaled for a book-sized run
"""
from .evidence import PATHS, ar_fraction, exchange_taken, exchanges
from .leader import LEADER_RULES, VarLeader, WindowedEWMA, star_leader
from .moo import (AUTHORS_CANDIDATES, TRIGGERS, DensityController, asf_pick, compression_gains,
                  exact_choice, fit_objectives, nsga2_choice, pareto_front, weighted_choice)
from .schedule import AUTHORS_PHASES, RESNET50_PARAMS, authors_schedule
from .switching import COLLECTIVES, COST_MODELS, choose, exchange_costs

# AUTHORS_PHASES, PATHS, RESNET50_PARAMS and TRIGGERS are importable here too, documented in
# their modules (lab.adaptive.schedule, .evidence, .moo)
__all__ = ["AUTHORS_CANDIDATES", "COLLECTIVES", "COST_MODELS", "DensityController",
           "LEADER_RULES", "VarLeader", "WindowedEWMA", "ar_fraction", "asf_pick",
           "authors_schedule", "choose", "compression_gains", "exact_choice", "exchange_costs",
           "exchange_taken", "exchanges", "fit_objectives", "nsga2_choice", "pareto_front",
           "star_leader", "weighted_choice"]
