"""Data that needs no download, split into identical global batches for any number of ranks.

- ``digits``: scikit-learn's 8x8 handwritten digits (1797 images, 10 classes);
- ``blobs``: synthetic Gaussian-blob classification; ``linreg``: synthetic linear regression;
- ``text``: character-level text from the standard library's ``pydoc_data.topics``.

The global batch of step ``t`` depends only on the seed and ``t``; rank ``r`` of ``p`` takes
the ``r``-th of ``p`` equal slices. So the mean of the ranks' gradients is the gradient of the
whole global batch, and a run with 4 workers matches a run with 1 at the same global batch.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from .argspec import SEED, Arg, takes
from .registry import Registry

REGISTRY = Registry("dataset")

#: examples in a synthetic data set (80% train, 20% test)
EXAMPLES = Arg(int, ge=10, le=10 ** 7, help="examples (80% for training)")
DIM = Arg(int, ge=1, le=10 ** 5, help="features per example")


def kind(task: str, image: bool = False):
    """Declare what a data set's factory gives, known before anything is loaded: its
    ``task`` ("classify", "regress" or "lm") and whether its examples are images (C, H, W):
    what decides which models fit it (:func:`lab.models.check_fits`)."""
    def deco(factory):
        factory.task, factory.image = task, image
        return factory
    return deco


@dataclass
class Dataset:
    name: str
    task: str                 # "classify", "regress" or "lm"
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    input_shape: tuple        # one example, e.g. (64,) or (1, 8, 8) views of it
    num_outputs: int          # classes, regression targets, or vocabulary size
    seq_len: int = 0          # for "lm": tokens per example
    vocab: str = ""

    @property
    def num_train(self) -> int:
        return len(self.x_train) if self.task != "lm" else len(self.x_train) - self.seq_len - 1

    def batch(self, step: int, batch_size: int, rank: int = 0, world_size: int = 1,
              seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's slice of the global batch of ``step``."""
        if batch_size % world_size:
            raise ValueError(f"batch_size ({batch_size}) must be divisible by the number of "
                             f"workers ({world_size})")
        g = torch.Generator().manual_seed(seed * 1_000_003 + step)
        if self.task == "lm":
            idx = torch.randint(0, self.num_train, (batch_size,), generator=g)
        else:
            if batch_size > self.num_train:
                raise ValueError(f"batch_size ({batch_size}) exceeds the {self.num_train} "
                                 f"training examples of {self.name!r}")
            idx = torch.randperm(self.num_train, generator=g)[:batch_size]
        per = batch_size // world_size
        mine = idx[rank * per:(rank + 1) * per]
        return self._take(mine, self.x_train, self.y_train)

    def test_set(self, limit: int = 2048) -> tuple[torch.Tensor, torch.Tensor]:
        if self.task == "lm":
            starts = torch.arange(0, min(len(self.x_test) - self.seq_len - 1, limit * self.seq_len),
                                  self.seq_len)
            return self._take(starts, self.x_test, self.y_test)
        return self.x_test[:limit], self.y_test[:limit]

    def _take(self, idx, x, y):
        if self.task == "lm":
            offs = idx[:, None] + torch.arange(self.seq_len + 1)
            window = x[offs]
            return window[:, :-1], window[:, 1:]
        return x[idx], y[idx]


@REGISTRY.register("digits")
@kind("classify", image=True)
@takes(seed=SEED, test_fraction=Arg(float, gt=0, lt=1, help="held out, in every class"))
def digits(seed: int = 0, test_fraction: float = 0.2) -> Dataset:
    """scikit-learn's digits, read straight from the file it ships: importing scikit-learn
    costs seconds per rank when several ranks start at once on a small machine."""
    x, y = _digits_arrays()
    g = torch.Generator().manual_seed(seed)
    test = torch.zeros(len(y), dtype=torch.bool)
    for c in range(10):  # stratified split: the same fraction of every class held out
        members = torch.nonzero(y == c).squeeze(1)
        members = members[torch.randperm(len(members), generator=g)]
        test[members[: round(test_fraction * len(members))]] = True
    order = torch.randperm(len(y), generator=g)
    tr, te = order[~test[order]], order[test[order]]
    return Dataset("digits", "classify", x[tr], y[tr], x[te], y[te], (1, 8, 8), 10)


def _digits_arrays() -> tuple[torch.Tensor, torch.Tensor]:
    import importlib.util
    import pathlib

    import numpy as np
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("data='digits' needs scikit-learn installed (it ships the data file)")
    path = pathlib.Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data" / "digits.csv.gz"
    if path.exists():
        arr = np.loadtxt(path, delimiter=",", dtype=np.float32)
    else:  # a future layout: fall back to the public loader
        from sklearn.datasets import load_digits
        d = load_digits()
        arr = np.column_stack([d.data, d.target]).astype(np.float32)
    return torch.from_numpy(arr[:, :-1] / 16.0), torch.from_numpy(arr[:, -1]).long()


@REGISTRY.register("blobs")
@kind("classify")
@takes(seed=SEED, n=EXAMPLES, dim=DIM, classes=Arg(int, ge=2, le=10 ** 4, help="classes"),
       spread=Arg(float, gt=0, help="distance of the centers"))
def blobs(seed: int = 0, n: int = 4096, dim: int = 32, classes: int = 4, spread: float = 2.0) -> Dataset:
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(classes, dim, generator=g) * spread / dim ** 0.5 * 3
    y = torch.randint(0, classes, (n,), generator=g)
    x = centers[y] + torch.randn(n, dim, generator=g)
    cut = int(0.8 * n)
    return Dataset("blobs", "classify", x[:cut], y[:cut], x[cut:], y[cut:], (dim,), classes)


@REGISTRY.register("linreg")
@kind("regress")
@takes(seed=SEED, n=EXAMPLES, dim=DIM, noise=Arg(float, ge=0, help="standard deviation of the "
                                                                     "targets' noise"))
def linreg(seed: int = 0, n: int = 4096, dim: int = 64, noise: float = 0.1) -> Dataset:
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(dim, 1, generator=g)
    x = torch.randn(n, dim, generator=g)
    y = x @ w + noise * torch.randn(n, 1, generator=g)
    cut = int(0.8 * n)
    return Dataset("linreg", "regress", x[:cut], y[:cut], x[cut:], y[cut:], (dim,), 1)


@REGISTRY.register("text")
@kind("lm")
@takes(seed=SEED, seq_len=Arg(int, ge=1, le=4096, help="tokens per example"),
       max_chars=Arg(int, ge=1, help="characters of the corpus used"),
       rule=lambda a: f"max_chars ({a['max_chars']}) must be >= 20 x (seq_len + 2) = "
                      f"{20 * (a['seq_len'] + 2)}: a tenth is held out and must hold a sequence"
       if a["max_chars"] < 20 * (a["seq_len"] + 2) else None)
def text(seed: int = 0, seq_len: int = 32, max_chars: int = 400_000) -> Dataset:
    from pydoc_data.topics import topics
    corpus = "\n".join(topics[k] for k in sorted(topics))[:max_chars]
    vocab = "".join(sorted(set(corpus)))
    lookup = {c: i for i, c in enumerate(vocab)}
    ids = torch.tensor([lookup[c] for c in corpus], dtype=torch.int64)
    cut = int(0.9 * len(ids))
    return Dataset("text", "lm", ids[:cut], ids[:cut], ids[cut:], ids[cut:], (seq_len,),
                   len(vocab), seq_len=seq_len, vocab=vocab)


def load(name: str, **kwargs) -> Dataset:
    """A dataset by name: ``load("digits")``."""
    return REGISTRY.make(name, **kwargs)


def names() -> list[str]:
    return REGISTRY.names()


def task_of(name: str) -> str:
    """The task of data set ``name`` ("classify", "regress" or "lm"), from its declaration."""
    return REGISTRY.get(name).task


def is_image(name: str) -> bool:
    """Whether data set ``name`` has image examples (C, H, W), from its declaration."""
    return REGISTRY.get(name).image


def train_size(name: str, **kwargs) -> int | None:
    """Training examples of data set ``name`` with ``kwargs`` (its arguments, checked), or None
    where a batch may draw any number (language modelling samples windows with replacement).
    Loaded once per process and arguments (the split does not depend on the seed)."""
    REGISTRY.check_arguments(name, kwargs, injected=("seed",))
    if task_of(name) == "lm":
        return None
    try:
        key = tuple(sorted(kwargs.items()))
        hash(key)
    except TypeError:
        return load(name, **kwargs).num_train
    return _train_size(name, key)


@functools.lru_cache(maxsize=64)
def _train_size(name: str, key: tuple) -> int:
    return load(name, **dict(key)).num_train
