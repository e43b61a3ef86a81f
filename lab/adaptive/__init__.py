"""Adaptive communication (Part 8): AR-Topk's leader choice, collective switching by the
alpha-beta model, and the multi-objective controller over the density.

Tyagi & Swany, "Flexible Communication for Optimal Distributed Learning over Unpredictable
Networks", IEEE BigData 2023 (arXiv 2312.02493); the authors' code is sahiltyagi4/ARTopk
(``flexible_compression/``). One idea per module:

- ``leader``: who picks the shared indices (STAR round-robin, VAR largest smoothed norm)
- ``switching``: modeled cost of each way to exchange a Top-k gradient, and the cheapest
- ``moo``: compression gain, curve fits, NSGA-II and the ASF pick (or an exact search)
"""
from .leader import LEADER_RULES, VarLeader, WindowedEWMA, star_leader
from .moo import (AUTHORS_CANDIDATES, DensityController, asf_pick, compression_gains,
                  exact_choice, fit_objectives, nsga2_choice, pareto_front, weighted_choice)
from .switching import COLLECTIVES, COST_MODELS, choose, exchange_costs

__all__ = ["AUTHORS_CANDIDATES", "COLLECTIVES", "COST_MODELS", "DensityController",
           "LEADER_RULES", "VarLeader", "WindowedEWMA", "asf_pick", "choose",
           "compression_gains", "exact_choice", "exchange_costs", "fit_objectives",
           "nsga2_choice", "pareto_front", "star_leader", "weighted_choice"]
