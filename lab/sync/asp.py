"""``asp``: asynchronous parallel SGD on a parameter server (Downpour SGD: Dean et al., NeurIPS
2012, sec. 4.1; Dogwild, Noel & Osindero 2014, is the same scheme across GPUs and machines,
workers sending gradients rather than parameters).

No barrier: the server applies each gradient the moment it arrives and answers that worker
alone, who goes on with the current parameters. A gradient is therefore computed on parameters
``tau`` updates old (eq. ``x_{t+1} = x_t - lr g(x_{t - tau})``), and a slow worker only
contributes fewer gradients. Each gradient is applied with ``lr / n`` so that ``n`` gradients
move the model as far as one BSP step (our equal-work convention; Downpour applies each one at
the full rate, which is ``--lr`` times ``n`` here).
"""
from __future__ import annotations

from .base import register
from .server import ServerMode


@register("asp")
class ASP(ServerMode):
    name = "asp"
    resumable = True  # at a step boundary every grant can be made anew

    def on_push(self, srv, w, grad, version):
        srv.apply([grad], 1.0 / self.n)
        srv.release(w)
        return True
