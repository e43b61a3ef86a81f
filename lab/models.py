"""Small models for the book, built for a :class:`lab.data.Dataset` (no downloads).

``mlp`` and ``linear`` for any vector data; ``cnn``, ``vgg`` (big fully-connected tail, the
shape P3 cares about: Simonyan & Zisserman, ICLR 2015) and ``resnet`` (He et al., CVPR 2016)
for image data; ``gpt``, a tiny decoder-only transformer (Vaswani et al., NeurIPS 2017) for
character-level text.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

from . import data as data_mod
from .argspec import Arg, takes
from .data import Dataset
from .registry import Registry

REGISTRY = Registry("model")

#: a layer's width (hidden units, channels, embedding size)
WIDTH = Arg(int, ge=1, le=2 ** 16, help="units or channels of a layer")
DEPTH = Arg(int, ge=1, le=256, help="layers")


def _numel(shape) -> int:
    return math.prod(shape)


def fits(*tasks: str, image: bool = False):
    """Declare the data a model's factory fits: its ``tasks`` and whether it needs image
    examples; :func:`check_fits` reads it before anything is built or loaded."""
    def deco(factory):
        factory.tasks, factory.image = tasks, image
        return factory
    return deco


def _refuse(model: str, data: str, task: str, tasks, not_image: str | None) -> None:
    if task not in tasks:
        raise ValueError(f"model={model!r} does not fit data={data!r} (task {task!r}; "
                         f"{model} needs {' or '.join(tasks)})")
    if not_image:
        raise ValueError(f"model={model!r} needs image data (C, H, W); data={data!r} "
                         f"{not_image}")


def check_fits(model: str, data: str) -> None:
    """Raise a ValueError if model ``model`` does not fit data set ``data`` (task, images),
    from both declarations: nothing is loaded or built (a config checks it when made)."""
    m = REGISTRY.get(model)
    _refuse(model, data, data_mod.task_of(data), m.tasks,
            "has vectors, not images" if m.image and not data_mod.is_image(data) else None)


def _need(data: Dataset, model: str, tasks: tuple[str, ...], image: bool = False) -> None:
    flat = image and len(data.input_shape) != 3
    _refuse(model, data.name, data.task, tasks,
            f"has input shape {data.input_shape}" if flat else None)


@REGISTRY.register("linear")
@fits("classify", "regress")
def linear(data: Dataset) -> nn.Module:
    _need(data, "linear", ("classify", "regress"))
    return nn.Sequential(nn.Flatten(), nn.Linear(_numel(data.input_shape), data.num_outputs))


@REGISTRY.register("mlp")
@fits("classify", "regress")
@takes(hidden=WIDTH, depth=DEPTH)
def mlp(data: Dataset, hidden: int = 64, depth: int = 2) -> nn.Module:
    _need(data, "mlp", ("classify", "regress"))
    layers, width = [nn.Flatten()], _numel(data.input_shape)
    for _ in range(depth - 1):
        layers += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    return nn.Sequential(*layers, nn.Linear(width, data.num_outputs))


class _Image(nn.Module):
    """Reshape flat vectors to (C, H, W) before the convolutional body."""

    def __init__(self, shape, body: nn.Module):
        super().__init__()
        self.shape, self.body = tuple(shape), body

    def forward(self, x):
        return self.body(x.reshape(-1, *self.shape))


@REGISTRY.register("cnn")
@fits("classify", image=True)
@takes(channels=WIDTH)
def cnn(data: Dataset, channels: int = 16) -> nn.Module:
    _need(data, "cnn", ("classify",), image=True)
    c, h, w = data.input_shape
    body = nn.Sequential(
        nn.Conv2d(c, channels, 3, padding=1), nn.ReLU(),
        nn.Conv2d(channels, 2 * channels, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(2 * channels * (h // 2) * (w // 2), data.num_outputs))
    return _Image(data.input_shape, body)


@REGISTRY.register("vgg")
@fits("classify", image=True)
@takes(channels=WIDTH, fc=WIDTH)
def vgg(data: Dataset, channels: int = 16, fc: int = 512) -> nn.Module:
    """Two conv blocks and three big fully-connected layers: most bytes sit at the end."""
    _need(data, "vgg", ("classify",), image=True)
    c, h, w = data.input_shape
    body = nn.Sequential(
        nn.Conv2d(c, channels, 3, padding=1), nn.ReLU(),
        nn.Conv2d(channels, channels, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(channels, 2 * channels, 3, padding=1), nn.ReLU(),
        nn.Flatten(),
        nn.Linear(2 * channels * (h // 2) * (w // 2), fc), nn.ReLU(),
        nn.Linear(fc, fc), nn.ReLU(),
        nn.Linear(fc, data.num_outputs))
    return _Image(data.input_shape, body)


class _Block(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(x + self.bn2(self.conv2(out)))


@REGISTRY.register("resnet")
@fits("classify", image=True)
@takes(channels=WIDTH, blocks=Arg(int, ge=0, le=256, help="residual blocks"))
def resnet(data: Dataset, channels: int = 16, blocks: int = 2) -> nn.Module:
    _need(data, "resnet", ("classify",), image=True)
    c = data.input_shape[0]
    body = nn.Sequential(
        nn.Conv2d(c, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels), nn.ReLU(),
        *[_Block(channels) for _ in range(blocks)],
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, data.num_outputs))
    return _Image(data.input_shape, body)


class TinyGPT(nn.Module):
    """Decoder-only transformer: token + position embeddings, causal self-attention blocks."""

    def __init__(self, vocab: int, seq_len: int, dim: int = 64, layers: int = 2, heads: int = 2):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.zeros(seq_len, dim))
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True,
                                           norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq_len))

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos[:t]
        x = self.blocks(x, mask=self.mask[:t, :t], is_causal=True)
        return self.head(self.norm(x))


@REGISTRY.register("gpt")
@fits("lm")
@takes(dim=WIDTH, layers=DEPTH, heads=Arg(int, ge=1, le=256, help="attention heads"),
       rule=lambda a: f"dim ({a['dim']}) must be divisible by heads ({a['heads']})"
       if a["dim"] % a["heads"] else None)
def gpt(data: Dataset, dim: int = 64, layers: int = 2, heads: int = 2) -> nn.Module:
    _need(data, "gpt", ("lm",))
    return TinyGPT(data.num_outputs, data.seq_len, dim, layers, heads)


def make(name: str, data: Dataset, seed: int = 0, **kwargs) -> nn.Module:
    """Build model ``name`` for ``data`` with weights drawn from ``seed`` (same on every rank);
    ``kwargs`` are checked against its declaration."""
    REGISTRY.check_arguments(name, kwargs, injected=("data",))
    factory = REGISTRY.get(name)
    torch.manual_seed(seed)
    return factory(data, **kwargs)


def loss_fn(task: str):
    if task == "regress":
        return nn.functional.mse_loss
    if task == "lm":
        return lambda out, y: nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
    return nn.functional.cross_entropy


def names() -> list[str]:
    return REGISTRY.names()


class ForwardTrace(NamedTuple):
    """What one forward pass did with the parameters (:func:`trace_forward`)."""

    params: list          # every parameter, in the order the forward pass first used it
    site: dict            # id(parameter) -> the innermost module running at that first use


class _FirstUse(TorchFunctionMode):
    """Note every parameter handed to a torch function, the first time it is."""

    def __init__(self, params, stack):
        super().__init__()
        self.ids, self.stack, self.order, self.site = {id(p): p for p in params}, stack, [], {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        for a in tree_leaves((args, kwargs or {})):
            if id(a) in self.ids and id(a) not in self.site:
                self.order.append(self.ids[id(a)])
                self.site[id(a)] = self.stack[-1]
        return func(*args, **(kwargs or {}))


def trace_forward(model: nn.Module, x: torch.Tensor) -> ForwardTrace:
    """The order in which ``model``'s forward pass on ``x`` first uses each parameter, and the
    module whose forward is running then: P3 (Jayarajan et al., SysML 2019, Section 4) gives
    priorities by *forward* order, which registration order need not be (``gpt``'s pre-norm
    block registers ``norm1`` after ``linear2`` and uses it first; attention reads
    ``out_proj.weight`` without calling ``out_proj``). One batch, no gradient, eval mode, no
    side effect on the model. Parameters the pass never used come last, in registration order,
    with the model itself as their site."""
    params, stack = list(model.parameters()), [model]
    handles = []

    def leave(_m, _i, _o):  # returns None: the output is left alone
        stack.pop()
    for m in model.modules():
        handles.append(m.register_forward_pre_hook(lambda mod, _i: stack.append(mod) and None))
        handles.append(m.register_forward_hook(leave))
    was_training = model.training
    model.eval()
    mode = _FirstUse(params, stack)
    try:
        with torch.no_grad(), mode:
            model(x)
    finally:
        model.train(was_training)
        for h in handles:
            h.remove()
    seen = set(mode.site)
    rest = [p for p in params if id(p) not in seen]
    return ForwardTrace(mode.order + rest, {**mode.site, **{id(p): model for p in rest}})
