"""Argument declarations shared by the attacks (:mod:`lab.argspec`): checked when an attack is
built and, from the same declaration, when a ``TrainConfig`` names it (before launch)."""
from __future__ import annotations

from ..argspec import Arg

#: a strength: a finite number > 0
POSITIVE = Arg(float, gt=0, help="strength of the attack")
