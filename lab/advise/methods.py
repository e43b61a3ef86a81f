"""The methods the advisor ranks: one representative of every family the book teaches.

Each is a set of :class:`~lab.train.config.TrainConfig` overrides, with the learning rate the
book's chapters train it with (sign methods need a much smaller step than SGD, error feedback a
larger one: Part 4; the asynchronous parameter server SGD's, at Part 2's equal-work scaling). A method is named as a reader would name it; ``family`` groups them on
Part 10's map.
"""
from __future__ import annotations

from dataclasses import dataclass, field

SGD = {"lr": 0.05, "momentum": 0.9}
SIGN = {"lr": 0.003, "momentum": 0.0}
EF = {"lr": 0.2, "momentum": 0.0}


@dataclass(frozen=True)
class Method:
    """A named training method: ``family`` for the map, ``overrides`` for its TrainConfig."""

    name: str
    family: str
    overrides: dict = field(default_factory=dict)
    note: str = ""

    def config(self, base):
        """``base`` (a TrainConfig) with this method's settings and label."""
        return base.with_(label=self.name, **self.overrides)


#: The methods the advisor ranks and Part 10 trains, by name: one or two per family.
METHODS = {m.name: m for m in (
    Method("fp32", "dense", dict(SGD), "fp32 allreduce, the baseline"),
    Method("fp16", "dense", dict(compressor="fp16", **SGD), "fp16 allreduce, half the bytes"),
    Method("efsgd", "sign + EF", dict(compressor="efsgd", **EF),
           "scaled signs with error feedback (Karimireddy et al. 2019)"),
    Method("signum", "sign + EF", dict(aggregator="signum", **SIGN),
           "majority vote on momentum signs (Bernstein et al. 2019)"),
    Method("qsgd", "quantization", dict(compressor="qsgd", compressor_kw={"s": 15}, **SGD),
           "QSGD, 4 bits and a sign (Alistarh et al. 2017)"),
    Method("terngrad", "quantization", dict(compressor="terngrad", **SGD),
           "TernGrad (Wen et al. 2017)"),
    Method("topk+ef", "sparsification",
           dict(compressor="topk", compressor_kw={"density": 0.01}, error_feedback=True, **EF),
           "Top-k at 1% with error feedback, allgather"),
    Method("dgc", "sparsification",
           dict(compressor="dgc", compressor_kw={"density": 0.01, "warmup_steps": 5}, **EF),
           "deep gradient compression (Lin et al. 2018): its own momentum correction, so none "
           "in the optimizer"),
    Method("artopk", "adaptive",
           dict(aggregator="adaptive_topk", aggregator_kw={"warmup_steps": 5}, **EF),
           "AR-Topk: collective and density chosen by the authors' controller (Part 8), with "
           "a 5-step warm-up so that a 16-step profile sees it settled"),
    Method("powersgd", "low rank", dict(aggregator="powersgd", aggregator_kw={"rank": 2}, **SGD),
           "PowerSGD rank 2 with error feedback (Vogels et al. 2019)"),
    Method("sketchsgd", "sketch",
           dict(aggregator="sketchsgd", aggregator_kw={"density": 0.01, "width": 4096}, **EF),
           "SketchSGD, count sketch then second round (Ivkin et al. 2019)"),
    Method("local-sgd", "averaging", dict(averaging="local", averaging_kw={"period": 8}, **SGD),
           "local SGD, parameters averaged every 8 steps"),
    Method("p3", "scheduling", dict(schedule="p3", schedule_kw={"calls": "step"}, **SGD),
           "P3: fp32 gradients sliced and sent by priority, overlapped with backward; one real "
           "call a step, so that its profile (no link) moves bytes as its runs on a link do"),
    Method("async-ps", "asynchronous", dict(sync="asp", **SGD),
           "asynchronous parameter server (Downpour SGD, Dean et al. 2012): rank 0 serves, the "
           "other w-1 ranks push gradients and pull parameters without waiting for each other "
           "(2 ranks: one worker). SGD's rate, as Part 2 trains ASP: each gradient is applied "
           "with lr/(w-1), so w-1 of them, one step, move the model as far as one fp32 step"),
)}


#: Held-out accuracy each model's time to target is measured to (Part 10; the curves of
#: ``convergence.json`` were measured for these).
TARGETS = {"mlp": 0.9, "cnn": 0.9, "linear": 0.85}

#: Model settings of the advisor's runs: the mlp as wide as Part 4's (a 150 kB gradient, so that
#: the link matters), the others as the library builds them.
MODEL_KW = {"mlp": {"hidden": 512}}


def base_config(model: str = "mlp", steps: int = 16, eval_every: int = 0):
    """The TrainConfig every advisor profile and grid run starts from (digits, global batch 64,
    seed 0): the runs whose curves give the penalties and the profiles priced against them
    must be the same training."""
    from ..train import TrainConfig
    return TrainConfig(model=model, data="digits", steps=steps, batch_size=64,
                       eval_every=eval_every, seed=0, model_kw=dict(MODEL_KW.get(model, {})))


def get(name: str) -> Method:
    """The method called ``name`` (a clear error naming the known ones otherwise)."""
    if name not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {name!r}")
    return METHODS[name]
