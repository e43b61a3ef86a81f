"""Forward order from a trace (issue 25, item 4): the overlap engine's layers follow the order in
which one forward pass first uses each parameter, for every model, and every layer's wait fires."""
import pytest
import torch

from lab import models, schedule
from lab.comm import Collective
from lab.runtime.context import RankContext
from lab.train import TrainConfig
from lab.train import loop

DATA = {"linear": "linreg", "mlp": "digits", "cnn": "digits", "vgg": "digits",
        "resnet": "digits", "gpt": "text"}


def test_every_model_is_covered():
    assert sorted(DATA) == sorted(models.names())


@pytest.mark.parametrize("model", sorted(DATA))
def test_layers_follow_the_traced_use_order_and_every_pre_hook_fires(model):
    cfg = TrainConfig(model=model, data=DATA[model], steps=2, batch_size=8, lr=0.01,
                      schedule="p3", schedule_kw={"timeline": True})
    ctx = RankContext(0, 1, torch.device("cpu"), "none", Collective())
    e = loop.engine(ctx, cfg, ctx.comm)
    x, y = e.data.batch(0, cfg.batch_size, 0, 1, cfg.seed)
    trace = models.trace_forward(e.model, x)
    s = schedule.make("p3", e, **cfg.schedule_kw)
    try:
        # the engine's parameters, layer by layer, are the traced order grouped by module
        flat = [p for _, ps in s.layers for p in ps]
        first = {}
        for i, p in enumerate(trace.params):
            first.setdefault(id(p), i)
        layer_first = [min(first[id(p)] for p in ps) for _, ps in s.layers]
        assert layer_first == sorted(layer_first)
        assert sorted(map(id, flat)) == sorted(id(p) for p in e.params)
        for step in range(2):   # the second forward waits for the first step's exchange
            r = s.step(step, x, y)
        fired = [ev[1] for ev in r.info["events"] if ev[0] == "fwd"]
        assert sorted(fired) == list(range(len(s.layers)))   # every layer's wait, in a pre-hook
    finally:
        s.close()


def test_gpt_uses_norm1_before_linear2_and_out_proj_inside_attention():
    d = __import__("lab.data", fromlist=["load"]).load("text")
    m = models.make("gpt", d)
    x, _ = d.batch(0, 4, 0, 1)
    tr = models.trace_forward(m, x)
    name = {id(p): n for n, p in m.named_parameters()}
    order = [name[id(p)] for p in tr.params]
    blk = "blocks.layers.0."
    assert order.index(blk + "norm1.weight") < order.index(blk + "self_attn.in_proj_weight") \
        < order.index(blk + "linear2.weight")
    reg = [n for n, _ in m.named_parameters()]
    assert reg.index(blk + "norm1.weight") > reg.index(blk + "linear2.weight")
    site = tr.site[id(m.blocks.layers[0].self_attn.out_proj.weight)]
    assert site is m.blocks.layers[0].self_attn                  # where its wait must go
    assert m.training                                            # the trace left the mode alone
