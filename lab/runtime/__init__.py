"""Process launching: ``launch`` for notebooks and scripts, ``from_env`` under torchrun."""
from .context import RankContext, from_env, pick_backend
from .launch import DEFAULT_TIMEOUT, LaunchError, launch

__all__ = ["DEFAULT_TIMEOUT", "LaunchError", "RankContext", "from_env", "launch", "pick_backend"]
