"""Count sketch, SketchML and Sketched SGD: properties from the papers."""
import pytest
import torch

from lab import compress
from lab.comm import Collective
from lab.compress.countsketch import CountSketch
from lab.compress.sketchml import delta_decode, delta_encode


def test_count_sketch_is_exactly_linear():
    g = torch.Generator().manual_seed(0)
    a = torch.randint(-1000, 1000, (5000,), generator=g).float()  # integers: sums are exact
    b = torch.randint(-1000, 1000, (5000,), generator=g).float()
    cs = CountSketch(5000, rows=5, width=300, seed=3)
    assert torch.equal(cs.sketch(a) + cs.sketch(b), cs.sketch(a + b))


def test_heavy_hitters_recovered_whp():
    found, trials = 0, 50
    for t in range(trials):
        g = torch.Generator().manual_seed(t)
        x = torch.randn(20000, generator=g) * 0.01
        heavy = torch.randperm(20000, generator=g)[:10]
        x[heavy] = 1.0  # each holds x_i^2 >= 1/11 of |x|^2
        cs = CountSketch(20000, rows=5, width=1000, seed=t)
        top = torch.topk(cs.estimate(cs.sketch(x)).abs(), 10).indices
        found += set(top.tolist()) == set(heavy.tolist())
    assert found >= 0.95 * trials


def test_countsketch_codec_is_unbiased():
    x = torch.randn(50)
    draws = torch.stack([compress.make("countsketch", rows=3, width=16, seed=s).decompress(
        *compress.make("countsketch", rows=3, width=16, seed=s).compress(x)) for s in range(3000)])
    assert torch.allclose(draws.mean(0), x, atol=0.25)


def test_countsketch_codec_refuses_width_zero():
    with pytest.raises(ValueError, match="width"):
        compress.make("countsketch", width=0)
    with pytest.raises(ValueError, match="width"):
        compress.make("sketchml", width=0)
    with pytest.raises(ValueError, match="width"):
        from lab.aggregate import make
        make("sketchsgd", comm=Collective(), width=0)


def test_delta_binary_round_trip_and_size():
    keys = torch.tensor([5, 200, 456, 70000, 2 ** 26])
    flags, data = delta_encode(keys)
    # deltas 5, 195, 256, 69544, 67038864 need 1, 1, 2, 3, 4 bytes; 2-bit flags for 5 keys: 2 bytes
    assert data.numel() == 11 and flags.numel() == 2
    assert torch.equal(delta_decode(flags, data, 5), keys)


def _sparse(n=4000, nnz=400, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.zeros(n)
    x[torch.randperm(n, generator=g)[:nnz]] = torch.randn(nnz, generator=g)
    return x


def test_sketchml_round_trip_within_bucket_width():
    x = _sparse()
    codec = compress.make("sketchml", buckets=16, rows=3, width=40000)  # collisions rare
    y = codec.decompress(*codec.compress(x))
    assert torch.equal(y != 0, x != 0) and torch.equal(torch.sign(y), torch.sign(x))
    for sign in (1, -1):
        mags = (sign * x)[sign * x > 0].sort().values
        edges = mags[torch.arange(17) * (mags.numel() - 1) // 16]
        width = float((edges[1:] - edges[:-1]).max())
        err = ((y - x)[sign * x > 0]).abs().max()
        assert err <= width + 1e-6


def test_sketchml_never_overestimates_and_exact_bytes():
    x = _sparse(seed=1)
    codec = compress.make("sketchml", buckets=32, rows=2, width=50)  # many collisions
    payload, ctx = codec.compress(x)
    y = codec.decompress(payload, ctx)
    means_pos = payload[1]
    assert (y.abs() <= x.abs() + means_pos.max()).all()
    # the top bucket's mean bounds every decoded magnitude of that sign from above
    pos = x > 0
    assert (y[pos] <= means_pos.max() + 1e-6).all()
    npos, nneg = int(pos.sum()), int((x < 0).sum())
    keys = [x.nonzero().squeeze(1)[m] for m in (x[x != 0] > 0, x[x != 0] < 0)]
    key_bytes = sum(int(delta_encode(k)[1].numel()) + -(-k.numel() // 4) for k in keys)
    expected = 8 + 4 * (32 + 32) + 2 * 2 * 50 + key_bytes
    assert compress.wire_bytes(payload) == expected and npos + nneg == 400


def test_sketchsgd_single_rank_keeps_exact_heavy_values():
    from lab.aggregate import make
    agg = make("sketchsgd", comm=Collective(), k=3, width=256)
    x = torch.randn(1000) * 0.01
    x[[7, 70, 700]] = torch.tensor([5.0, -4.0, 3.0])
    out = agg.reduce(x, "k", 0)
    assert torch.equal(out.nonzero().squeeze(1), torch.tensor([7, 70, 700]))
    assert torch.equal(out[[7, 70, 700]], x[[7, 70, 700]])  # round two: exact values
    assert torch.allclose(out + agg.v["k"], x)  # the rest waits in the error accumulator
