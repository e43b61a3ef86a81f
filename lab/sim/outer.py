"""Compute utilisation of an outer-loop method across sites: DiLoCo and Streaming DiLoCo.

DiLoCo (Douillard et al., arXiv 2311.08105, Algorithm 1) computes ``H`` inner steps of
``step_s`` seconds, then allreduces the outer gradient of ``n_params`` values at ``bits`` bits
a value over ``sites`` sites with no overlap. Streaming DiLoCo (Douillard et al., arXiv
2501.18512, Sec. 3) splits the model into ``fragments``, syncs one every ``H / fragments``
steps and lets each exchange overlap the next ``tau`` inner steps, so only what outlasts
``tau * step_s`` is exposed. The exchange is priced by :func:`lab.sim.collectives.allreduce`
(a ring over the sites, ``latency_s`` a message), the model every other technique's step uses.
"""
from __future__ import annotations

import math

from .collectives import allreduce
from .network import Cluster


def utilisation(bandwidth_bps: float, H: int, n_params: float, step_s: float, bits: float = 8,
                sites: int = 2, latency_s: float = 0.1, fragments: int = 1, tau: int = 0) -> float:
    """Fraction of the wall time the sites compute (``bandwidth_bps``: bits/s a site)."""
    for name, v in (("bandwidth_bps", bandwidth_bps), ("n_params", n_params), ("step_s", step_s),
                    ("bits", bits)):
        if not (v > 0) or math.isinf(v):
            raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
    if not isinstance(H, int) or H < 1:
        raise ValueError(f"H must be an int >= 1, got {H!r}")
    if not isinstance(fragments, int) or fragments < 1 or H % fragments:
        raise ValueError(f"fragments must be an int >= 1 dividing H ({H}), got {fragments!r}")
    if not isinstance(tau, int) or tau < 0:
        raise ValueError(f"tau must be an int >= 0, got {tau!r}")
    c = Cluster(sites, bandwidth_bps / 8, latency_s)
    one = allreduce(bits / 8 * n_params / fragments, c)        # one fragment's exchange
    exposed = fragments * max(0.0, one - tau * step_s)
    return H * step_s / (H * step_s + exposed)


def bandwidth_for(util: float, H: int, n_params: float, step_s: float, **kw) -> float:
    """The bits/s a site needs for compute utilisation ``util`` (``inf`` if latency alone
    forbids it): :func:`utilisation` inverted by bisection (it rises with bandwidth)."""
    if not 0 < util < 1:
        raise ValueError(f"util must be in (0, 1), got {util!r}")
    lo, hi = 1e3, 1e15
    if utilisation(hi, H, n_params, step_s, **kw) < util:
        return math.inf
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if utilisation(mid, H, n_params, step_s, **kw) < util else (lo, mid)
        if hi / lo < 1 + 1e-9:
            break
    return hi
