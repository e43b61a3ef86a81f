"""Count sketch, SketchML and Sketched SGD: properties from the papers."""
import math

import pytest
import torch

from lab import compress
from lab.comm import Collective
from lab.compress import wire_bytes
from lab.compress.countsketch import CountSketch
from lab.compress.sketchml import delta_decode, delta_encode, minmax_insert, minmax_query
from lab.train import TrainConfig


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


def _true_and_decoded(codec, x):
    """Per key, in key order: (keys, negative?, true bucket, decoded bucket, means, payload)."""
    payload, _ = codec.compress(x)
    keys, neg, true, means = codec.bucket_indices(x)
    dkeys, dneg, decoded = codec.decode_indices(payload)
    order = torch.argsort(dkeys)
    assert torch.equal(dkeys[order], keys) and torch.equal(dneg[order], neg)
    return keys, neg, true, decoded[order], means, payload


def test_minmax_sketch_query_never_exceeds_the_inserted_value():
    """Insert keeps the minimum in a cell, query takes the maximum over rows: the answer is at
    most the key's own value, and exactly it when the key has a cell of its own in some row.
    Random cases: keys, values, rows and widths (a width of 1 forces every collision)."""
    g = torch.Generator().manual_seed(0)
    for case in range(300):
        n = int(torch.randint(1, 200, (1,), generator=g))
        rows = int(torch.randint(1, 5, (1,), generator=g))
        width = int(torch.randint(1, 2 * n + 2, (1,), generator=g))
        values = torch.randint(0, 32, (n,), generator=g)
        cells = torch.randint(0, width, (n, rows), generator=g) + torch.arange(rows) * width
        got = minmax_query(minmax_insert(cells, values, rows * width), cells)
        assert (got <= values).all(), case
        shared = torch.bincount(cells.reshape(-1), minlength=rows * width)[cells]  # keys per cell
        alone = (shared == 1).any(dim=1)
        assert torch.equal(got[alone], values[alone]), case


@pytest.mark.parametrize("kw", [{}, dict(col_ratio=0.05), dict(groups=1), dict(groups=3, rows=1),
                                dict(buckets=7, groups=2), dict(buckets=64, col_ratio=2.0),
                                dict(density=0.05)])
def test_sketchml_decoded_index_never_exceeds_the_true_one_nor_leaves_its_group(kw):
    """The grouped MinMaxSketch's guarantee, key by key, on random sparse vectors: the decoded
    bucket index is <= the true one and >= the lowest index of the true one's group; the keys
    and their signs come back exactly."""
    for seed in range(8):
        x = _sparse(n=6000, nnz=int(torch.randint(1, 3000, (1,), generator=torch.Generator()
                                                   .manual_seed(seed))), seed=seed)
        codec = compress.make("sketchml", **kw)
        keys, neg, true, decoded, _, _ = _true_and_decoded(codec, x)
        assert (decoded <= true).all()
        assert (decoded >= true // codec.span * codec.span).all()


def test_sketchml_magnitude_bounds_and_the_enlargements_that_do_happen():
    """What holds for a value: same sign, at most its true bucket's mean (the quantizer's own
    value), at least the mean of its group's lowest bucket, so within the group's range of
    magnitudes. What does not: |decoded| <= |x|; a key below its bucket's mean comes back
    above its magnitude."""
    x = _sparse(n=20000, nnz=8000, seed=3)
    codec = compress.make("sketchml")
    keys, neg, true, decoded, means, payload = _true_and_decoded(codec, x)
    y = codec.decompress(payload, (x.shape, x.dtype, None))
    qpos = codec.buckets_per_sign(int((~neg).sum()), int(neg.sum()))[0]
    shift = neg.long() * qpos  # the negative means follow the positive ones
    got, mag = y[keys].abs(), x[keys].abs()
    assert torch.equal(torch.sign(y), torch.sign(x))
    assert torch.equal(got, means[decoded + shift])
    assert (got <= means[true + shift]).all()
    assert (got >= means[true // codec.span * codec.span + shift]).all()
    # the group's magnitude range bounds the error
    group = true // codec.span + neg.long() * 1000
    for gid in group.unique():
        members = group == gid
        lo, hi = mag[members].min(), mag[members].max()
        assert (got[members] >= lo).all() and (got[members] <= hi).all()
    # "never enlarges a magnitude" is false: about half the keys lie below their bucket's mean,
    # and the sketch's collisions pull only some of them down
    quantized = float((means[true + shift] > mag).float().mean())
    enlarged = float((got > mag).float().mean())
    assert 0.4 < quantized < 0.6 and 0.15 < enlarged < quantized, (quantized, enlarged)


def test_sketchml_without_collisions_is_the_quantizer():
    x = _sparse()
    codec = compress.make("sketchml", buckets=32, col_ratio=50.0, rows=3)  # collisions rare
    keys, neg, true, decoded, _, payload = _true_and_decoded(codec, x)
    assert float((decoded == true).float().mean()) > 0.99
    y = codec.decompress(payload, (x.shape, x.dtype, None))
    assert torch.equal(y != 0, x != 0) and torch.equal(torch.sign(y), torch.sign(x))


def test_sketchml_payload_bytes_are_exact_and_below_the_raw_index():
    """Every tensor of the payload, byte for byte: header (hash seed, key counts, keys per
    group), fp32 bucket means, the groups' bit-packed sketches, 2-bit length flags, deltas.
    At the reference's defaults (256 buckets, 8 groups, 2 rows, 0.3 columns per key) the
    sketches cost < 0.4 bytes a key, where a raw bucket index costs 1."""
    x = _sparse(n=100_000, nnz=30_000, seed=1)
    codec = compress.make("sketchml")
    payload, _ = codec.compress(x)
    header, means, tables, flags, data = payload
    npos, nneg = int((x > 0).sum()), int((x < 0).sum())
    counts = header[3:].tolist()
    qpos, qneg = codec.buckets_per_sign(npos, nneg)
    assert codec.span == 32 and header[1:3].tolist() == [npos, nneg]
    assert len(counts) == -(-qpos // 32) + -(-qneg // 32) and sum(counts) == npos + nneg
    sizes = [min(32, q - lo) for q in (qpos, qneg) for lo in range(0, q, 32)]
    cells_bits = [2 * math.ceil(0.3 * c) * (s - 1).bit_length() for c, s in zip(counts, sizes)]
    assert tables.dtype == torch.uint8 and tables.numel() == sum(-(-b // 8) for b in cells_bits)
    assert means.numel() == qpos + qneg == 256 and flags.numel() == -(-(npos + nneg) // 4)
    keys, _, true, _ = codec.bucket_indices(x)
    group = true // 32 + (x[keys] < 0).long() * 1000
    nbytes = 0
    for gid in group.unique():  # each group's keys, delta-encoded on their own
        nbytes += delta_encode(keys[group == gid])[1].numel()
    assert data.numel() == nbytes
    assert wire_bytes(payload) == 4 * header.numel() + 4 * 256 + tables.numel() + flags.numel() + nbytes
    per_key = tables.numel() / (npos + nneg)
    assert 0.37 < per_key < 0.4  # 2 rows x 0.3 x 5 bits / 8 = 0.375
    assert wire_bytes(payload) / (npos + nneg) < 2  # Top-k: 8 (fp32 value + int32 index)


def test_sketchml_handles_empty_one_sign_and_tiny_inputs():
    codec = compress.make("sketchml")
    for x in (torch.zeros(0), torch.zeros(50), torch.tensor([3.0]), torch.tensor([-1.0, 0.0, -2.0]),
              torch.tensor([1.0, -1.0]), torch.full((300,), 0.5)):
        y = codec.decompress(*codec.compress(x))
        assert torch.equal(torch.sign(y), torch.sign(x))
    y = codec.decompress(*codec.compress(torch.full((300,), 0.5)))
    assert torch.equal(y, torch.full((300,), 0.5))  # one value: every bucket's mean is exact


@pytest.mark.parametrize("kw, match", [
    (dict(col_ratio=0), "col_ratio"), (dict(col_ratio=-0.3), "col_ratio"),
    (dict(col_ratio=float("nan")), "col_ratio"), (dict(col_ratio=float("inf")), "col_ratio"),
    (dict(col_ratio=True), "col_ratio"), (dict(col_ratio="0.3"), "col_ratio"),
    (dict(groups=0), "groups"), (dict(buckets=0), "buckets"), (dict(rows=0), "rows"),
    (dict(density=0.0), "density")])
def test_sketchml_bad_arguments_are_value_errors_naming_them(kw, match):
    with pytest.raises(ValueError, match=match):
        compress.make("sketchml", **kw)
    with pytest.raises(ValueError, match=f"compressor_kw: .*{match}"):  # before any launch
        TrainConfig(compressor="sketchml", compressor_kw=kw)


def test_sketchml_parameters_reach_the_config_and_the_cli(capsys):
    from lab.cli.train import add_parser as _train_parser, config as _config
    import argparse
    parser = argparse.ArgumentParser()
    _train_parser(parser.add_subparsers(dest="command"))
    a = parser.parse_args(["train", "--compressor", "sketchml", "--compressor-kw", "groups=4",
                           "col_ratio=0.5", "buckets=64"])
    cfg = _config(a)
    assert cfg.compressor_kw == {"groups": 4, "col_ratio": 0.5, "buckets": 64}
    codec = compress.make(cfg.compressor, **cfg.compressor_kw)
    assert (codec.groups, codec.col_ratio, codec.buckets, codec.span) == (4, 0.5, 64, 16)
    from lab.cli import main
    assert main(["train", "--compressor", "sketchml", "--compressor-kw", "col_ratio=0"]) == 2
    assert "col_ratio" in capsys.readouterr().err


def test_sketchsgd_single_rank_keeps_exact_heavy_values():
    from lab.aggregate import make
    agg = make("sketchsgd", comm=Collective(), k=3, width=256)
    x = torch.randn(1000) * 0.01
    x[[7, 70, 700]] = torch.tensor([5.0, -4.0, 3.0])
    out = agg.reduce(x, "k", 0)
    assert torch.equal(out.nonzero().squeeze(1), torch.tensor([7, 70, 700]))
    assert torch.equal(out[[7, 70, 700]], x[[7, 70, 700]])  # round two: exact values
    assert torch.allclose(out + agg.v["k"], x)  # the rest waits in the error accumulator
