"""The layers the overlap engine (:mod:`lab.schedule.overlap`) exchanges, in the order one
traced forward pass first uses them, and where the next forward must wait for each; also used
by P3's parameter servers (:mod:`lab.sync.p3_server`). Re-exported by
:mod:`lab.schedule.overlap`.
"""
from __future__ import annotations

from ..models import trace_forward


def traced_layers(model, x, params=None):
    """The layers of ``model`` (each module with parameters, with those of its own in
    ``params``, default all) in the order a forward pass on ``x`` first uses them
    (:func:`lab.models.trace_forward`), and for each waiting site (the module running at a
    layer's first use) the indices of the layers it must wait for."""
    owned = {id(p) for p in (model.parameters() if params is None else params)}
    tr = trace_forward(model, x)
    owner = {id(p): m for m in model.modules() for p in m.parameters(recurse=False)}
    layers, index, sites = [], {}, {}
    for p in tr.params:
        if id(p) not in owned:
            continue
        m = owner[id(p)]
        if id(m) not in index:
            index[id(m)] = len(layers)
            layers.append((m, []))
            sites.setdefault(tr.site[id(p)], []).append(index[id(m)])
        layers[index[id(m)]][1].append(p)
    return layers, sites
