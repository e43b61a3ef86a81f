"""Data: the same global batch for any number of ranks; splits and text windows; models."""
import pytest
import torch

import lab
from lab import data as data_mod, models


@pytest.mark.parametrize("name", ["digits", "blobs", "linreg"])
def test_shards_of_a_step_make_up_the_global_batch_for_any_world_size(name):
    d = data_mod.load(name)
    x1, y1 = d.batch(step=7, batch_size=64, seed=3)
    for world in (2, 4, 8):
        parts = [d.batch(7, 64, r, world, seed=3) for r in range(world)]
        assert torch.equal(torch.cat([p[0] for p in parts]), x1)
        assert torch.equal(torch.cat([p[1] for p in parts]), y1)
    assert not torch.equal(d.batch(8, 64, seed=3)[0], x1)  # steps differ
    with pytest.raises(ValueError, match="divisible"):
        d.batch(0, 64, 0, 3)


def test_digits_split_is_stratified_disjoint_and_complete():
    d = data_mod.load("digits")
    assert len(d.x_train) + len(d.x_test) == 1797 and d.x_train.max() <= 1.0
    counts = torch.bincount(d.y_test, minlength=10)
    assert counts.min() >= 35 and counts.max() <= 37
    train_rows = {tuple(r.tolist()) for r in d.x_train}
    assert sum(tuple(r.tolist()) in train_rows for r in d.x_test) < 5  # a few digits repeat exactly


def test_text_windows_shift_targets_by_one():
    d = data_mod.load("text", seq_len=16)
    x, y = d.batch(0, 8)
    assert x.shape == y.shape == (8, 16) and torch.equal(x[:, 1:], y[:, :-1])
    assert d.num_outputs == len(d.vocab) > 50
    xt, yt = d.test_set(limit=4)
    assert xt.shape == (4, 16)


def test_gpt_is_causal():
    d = data_mod.load("text", seq_len=16)
    m = models.make("gpt", d).eval()
    x, _ = d.batch(0, 2)
    x2 = x.clone()
    x2[:, 10:] = (x2[:, 10:] + 1) % d.num_outputs  # change the future only
    with torch.no_grad():
        assert torch.allclose(m(x)[:, :10], m(x2)[:, :10], atol=1e-5)


def test_same_seed_same_weights_and_names_are_listed():
    d = data_mod.load("digits")
    a, b = models.make("vgg", d, seed=1), models.make("vgg", d, seed=1)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert set(models.names()) >= {"mlp", "cnn", "vgg", "resnet", "gpt", "linear"}
    assert set(data_mod.names()) >= {"digits", "blobs", "linreg", "text"}


def test_importing_lab_starts_nothing():
    import multiprocessing as mp
    import torch.distributed as dist
    assert lab.__version__ and not dist.is_initialized()
    assert not [p for p in mp.active_children() if p.name.startswith("lab-rank")]
