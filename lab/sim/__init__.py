"""The one step-time model (issue 52): a model's layers, a codec's bytes and compute, a collective
algorithm, a network (alpha, beta, NICs, a faster link inside a node), overlap and schedule, and
the advisor's convergence penalty, in pure Python.

``predict(Config(...))`` gives one configuration's step time with its error band;
:mod:`lab.sim.validate` scores it on stored end-to-end runs it was not fitted on.
"""
from .network import Cluster
from .step import Config, Prediction, predict, time_to_target

__all__ = ["Cluster", "Config", "Prediction", "predict", "time_to_target"]
