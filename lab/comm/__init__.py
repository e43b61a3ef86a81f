"""Communication: the collective wrapper, its byte ledger, alpha-beta costs, emulated links."""
from . import algorithms, cost
from .collective import Collective
from .cost import AlphaBeta
from .ledger import CommLedger, CommRecord, Stopwatch
from .network import PRESETS, Network, NetworkSchedule

__all__ = ["AlphaBeta", "algorithms", "Collective", "CommLedger", "CommRecord", "Network", "NetworkSchedule", "PRESETS",
           "Stopwatch", "cost"]
