"""The C kernels (lab/compress/kernels.c) against the torch references they replace (issue 8).

Deterministic kernels must give the reference's bits; the random ones (QSGD's and TernGrad's
stochastic rounding) the reference's distribution: levels floor(r) or floor(r) + 1, rounded up
with probability r - floor(r), so that decoding is unbiased (QSGD Lemma 3.1; TernGrad Sec. 3.1).
"""
import contextlib
import math
import warnings

import pytest
import torch

from lab.compress import ErrorFeedback, make, native
from lab.compress.onebit import side_sums
from lab.compress.packing import pack_bits, pack_uint, unpack_uint

pytestmark = pytest.mark.skipif(native.library() is None, reason="no C compiler here")


def _x(n, seed=0):
    x = torch.randn(n, generator=torch.Generator().manual_seed(seed))
    x[::97] = 0.0
    x[1::101] = -0.0
    return x


def _roundtrip(codec, x):
    payload, ctx = codec.compress(x)
    return payload, codec.decompress(payload, ctx)


@pytest.mark.parametrize("name,kw", [("sign", {}), ("scaled_sign", {}), ("onebit", {}),
                                     ("onebit", {"bucket_size": 64}), ("efsgd", {}),
                                     ("onebit_sgd", {"bucket_size": 512})])
@pytest.mark.parametrize("n", [1, 7, 8, 1000, 65537])
def test_deterministic_codecs_equal_their_reference_bit_for_bit(name, kw, n):
    for step in range(3):  # error feedback carries a residual from step to step
        x = _x(n, seed=step)
        if step == 0:
            fast, slow = make(name, **kw), make(name, **kw)
        p_fast, d_fast = _roundtrip(fast, x)
        with native.reference():
            p_slow, d_slow = _roundtrip(slow, x)
        for a, b in zip(p_fast, p_slow):
            assert a.dtype == b.dtype and torch.equal(a, b), name
        assert torch.equal(d_fast.view(torch.int32), d_slow.view(torch.int32))  # -0.0 too


def _extremes(n, seed=0):
    """Values of every magnitude a cast meets: subnormal in fp16, ties, near each max."""
    x = _x(n, seed) * torch.logspace(-9, 4.8, n)
    edges = torch.tensor([0.0, -0.0, 65504.0, -65519.9, 5.96e-8, 2.98e-8, 1e-40, 3.38e38, 1 + 2 ** -11])
    x[: min(n, len(edges))] = edges[:n]
    return x


@pytest.mark.parametrize("name", ["none", "fp16", "bf16"])
@pytest.mark.parametrize("n", [0, 1, 7, 8, 1000, 65537])
def test_casts_equal_their_reference_bit_for_bit(name, n):
    x = _extremes(n)
    if name == "fp16":
        x = x.clamp(-65504, 65504)  # beyond it fp16 refuses (tested below)
    p_fast, d_fast = _roundtrip(make(name), x)
    with native.reference():
        p_slow, d_slow = _roundtrip(make(name), x)
    assert p_fast[0].dtype == p_slow[0].dtype
    assert torch.equal(p_fast[0].view(torch.uint8), p_slow[0].view(torch.uint8))
    assert torch.equal(d_fast.view(torch.int32), d_slow.view(torch.int32))


@pytest.mark.parametrize("name", ["none", "fp16", "bf16"])
@pytest.mark.parametrize("at", [0, 13, 4999])  # in the vector body and in the tail
def test_casts_refuse_what_the_reference_refuses(name, at):
    bad = [(float("nan"), FloatingPointError), (float("-inf"), FloatingPointError)]
    bad += {"fp16": [(7e4, OverflowError)], "bf16": [(3.4028e38, OverflowError)]}.get(name, [])
    for value, error in bad:
        x = _x(5000)
        x[at] = value
        for reference in (False, True):
            with native.reference() if reference else contextlib.nullcontext():
                with pytest.raises(error, match=name):
                    make(name).compress(x)


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
@pytest.mark.parametrize("n,bucket", [(4096, 512), (1000, 512), (13, 512), (77, 77)])
def test_qsgd_decoder_equals_the_reference_bit_for_bit(bits, n, bucket):
    s = 2 ** bits - 1
    g = torch.Generator().manual_seed(bits)
    levels = torch.randint(0, s + 1, (n,), generator=g)
    payload = (torch.rand(-(-n // bucket), generator=g) * 10,
               pack_bits(torch.rand(n, generator=g) < 0.5), pack_uint(levels, bits))
    codec = make("qsgd", s=s, bucket_size=bucket)
    fast = codec.decode(payload, None, n, torch.float32)
    with native.reference():
        slow = codec.decode(payload, None, n, torch.float32)
    assert torch.equal(fast.view(torch.int32), slow.view(torch.int32))


def test_sign_bits_and_side_sums_match_float64_sums():
    for n in (1, 9, 4099):
        x = _x(n)
        bits, l1 = native.sign_bits(x)
        assert torch.equal(bits, pack_bits(x >= 0))
        assert l1 == pytest.approx(float(x.double().abs().sum()), rel=1e-12)
        for bucket in (8, 64, n):
            sums, counts = native.side_sums(x, bucket)
            ref_bits, ref_sums, ref_counts = side_sums(x, bucket)
            assert torch.equal(ref_bits, bits) and torch.equal(counts, ref_counts)
            assert torch.allclose(sums, ref_sums, rtol=1e-12, atol=1e-12)


def test_nan_reaches_every_sum():
    x = _x(100)
    x[50] = float("nan")
    assert native.sign_bits(x)[1] != native.sign_bits(x)[1]  # NaN
    sums, _ = native.side_sums(x, 8)
    assert torch.isnan(sums[6]).any() and not torch.isnan(sums[5]).any()


@pytest.mark.parametrize("name,kw,draws", [("qsgd", {"s": 3, "bucket_size": 64}, 4000),
                                           ("qsgd", {"s": 15}, 4000),
                                           ("terngrad", {"clip": None}, 4000)])
def test_stochastic_kernels_are_unbiased(name, kw, draws):
    """Monte Carlo: the mean of many decodes is x. Per value within 5 standard errors plus one
    rare event (a rounding up with probability 1e-4 may never show in 4000 draws), and summed
    over the values, signed by x's sign so that a pull toward zero cannot cancel out."""
    x = _x(256, seed=3)
    codec = make(name, seed=1, **kw)
    d = torch.stack([_roundtrip(codec, x)[1] for _ in range(draws)]).double()
    error, var = d.mean(dim=0) - x.double(), d.var(dim=0)
    step = (d.amax(dim=0) - d.amin(dim=0))  # one quantization step where a value ever moved
    assert (error.abs() <= 5 * (var / draws).sqrt() + 3 * step / draws + 1e-6).all()
    assert abs(float((error * x.sign()).sum() / (var.sum() / draws).sqrt())) < 5


def test_levels_round_up_with_probability_of_the_fraction():
    """Level floor(r) + 1 with probability r - floor(r), by value; never beyond s."""
    s, n, draws = 7, 64, 3000
    x = torch.linspace(-1, 1, n)
    norm = torch.tensor([float(torch.linalg.vector_norm(x))])
    r = (x.abs() / norm * s).double()
    ups = torch.zeros(n, dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    for _ in range(draws):
        levels, negative = native.stochastic_levels(x, n, norm, s, g)
        assert torch.equal(negative, x < 0) and int(levels.max()) <= s
        low = r.floor()
        assert ((levels.double() == low) | (levels.double() == low + 1)).all()
        ups += levels.double() - low
    frac = r - r.floor()
    spread = (frac * (1 - frac) / draws).sqrt()
    assert ((ups / draws - frac).abs() <= 5 * spread + 3 / draws).all()
    assert abs(float((ups / draws - frac).sum() / spread.square().sum().sqrt())) < 5


def test_same_seed_same_payload_and_ranks_differ():
    x = _x(5000)
    for name in ("qsgd", "terngrad"):
        a, b = make(name, seed=4), make(name, seed=4)
        assert all(torch.equal(p, q) for p, q in zip(a.compress(x)[0], b.compress(x)[0]))
        c = make(name, seed=4).bind(rank=1, world_size=2)
        assert not all(torch.equal(p, q) for p, q in zip(a.compress(x)[0], c.compress(x)[0]))


def test_terngrad_codes_match_the_reference_rule():
    x = _x(3000)
    payload, _ = make("terngrad", clip=None).compress(x)
    codes = unpack_uint(payload[1], x.numel(), 2)
    assert set(codes.unique().tolist()) <= {0, 1, 2}
    assert ((codes == 0) | ((codes == 1) & (x >= 0)) | ((codes == 2) & (x < 0))).all()
    assert (codes[x.abs() == x.abs().max()] != 0).all()  # probability 1 at the scaler


def test_kernels_refuse_short_payloads():
    with pytest.raises(ValueError, match="too short"):
        native.dequantize(torch.zeros(3, dtype=torch.uint8), 4, torch.zeros(2, dtype=torch.uint8),
                          16, 512, torch.ones(1), 15)
    with pytest.raises(ValueError, match="do not fit"):
        native.expand_bits(torch.zeros(1, dtype=torch.uint8), 16, 16, torch.ones(1, 2))


def test_error_feedback_keeps_its_residual_when_the_input_is_refused():
    ef = ErrorFeedback(make("scaled_sign"))
    ef.compress(_x(100), key="w")
    before = ef.residual("w")
    bad = _x(100)
    bad[3] = float("nan")
    with pytest.raises(FloatingPointError):
        ef.compress(bad, key="w")
    assert torch.equal(ef.residual("w"), before)


def test_no_compiler_means_the_reference_with_a_warning(monkeypatch, tmp_path):
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    monkeypatch.setenv("LAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(native, "_state", {})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert native.library() is None
    assert any("could not build" in str(w.message) for w in caught)
    assert not native.enabled(torch.zeros(8))
    payload, ctx = make("qsgd").compress(_x(1000))  # still works, on the reference
    assert make("qsgd").decompress(payload, ctx).shape == (1000,)


def _lowbias32(x):
    """Wellons' lowbias32 on uint32 values held in int64 (products wrap mod 2**64, which keeps
    their low 32 bits right)."""
    mask = 0xFFFFFFFF
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & mask
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & mask
    return x ^ (x >> 16)


@pytest.mark.parametrize("s,bucket", [(1, 64), (15, 512), (255, 1000)])
def test_levels_equal_a_from_scratch_torch_version_bit_for_bit(s, bucket):
    """The kernel's rounding written in torch: r = min(|x| / norm * s, s); up when the hash of
    (index, key), halved, is below (r - floor(r)) * 2**31."""
    x = _x(3000) ** 3
    norms = torch.linalg.vector_norm(torch.cat([x, x.new_zeros(-x.numel() % bucket)])
                                     .view(-1, bucket), dim=1)
    levels, negative = native.stochastic_levels(x, bucket, norms, s, torch.Generator().manual_seed(5))
    k0, k1 = torch.randint(0, 2 ** 32, (2,), generator=torch.Generator().manual_seed(5)).tolist()
    index = torch.arange(x.numel(), dtype=torch.int64)
    u = _lowbias32(_lowbias32((index + k0) & 0xFFFFFFFF) ^ k1) >> 1
    r = (x.abs() / norms.repeat_interleave(bucket)[:x.numel()] * s).clamp(max=s)
    low = r.to(torch.int32)
    threshold = ((r - low.float()) * 2.0 ** 31).to(torch.int64)
    assert torch.equal(levels, (low + (u < threshold).int()).to(torch.uint8))
    assert torch.equal(negative, x < 0)


def test_int32_range_is_min_and_max():
    """The wire-format check's one-pass range of an index part (kernels.c)."""
    if native.library() is None:
        pytest.skip("no C compiler")
    for n in (1, 7, 33, 1000, 10_487):
        x = torch.randint(-2 ** 31, 2 ** 31 - 1, (n,), dtype=torch.int32,
                          generator=torch.Generator().manual_seed(n))
        assert native.int32_range(x) == (int(x.min()), int(x.max()))
    for values in ([-2 ** 31, 2 ** 31 - 1], [-1], [0], [2 ** 31 - 1], [-2 ** 31], [-7, -3]):
        x = torch.tensor(values, dtype=torch.int32)  # the packed int64's halves, at their ends
        assert native.int32_range(x) == (min(values), max(values))


def test_scatter_checks_every_index_in_its_pass():
    """The sparse decoders' C scatter: the values at their indices, None on any index out of
    [0, n) (first, last, negative, n itself)."""
    if native.library() is None:
        pytest.skip("no C compiler")
    g = torch.Generator().manual_seed(3)
    idx = torch.randperm(1000, generator=g)[:37].to(torch.int32)
    vals = torch.randn(37, generator=g)
    want = torch.zeros(1000)
    want[idx.long()] = vals
    assert torch.equal(native.scatter(vals, idx, 1000), want)
    for j in (0, 36):
        for v in (-1, -2 ** 31, 1000, 2 ** 31 - 1):
            bad = idx.clone()
            bad[j] = v
            assert native.scatter(vals, bad, 1000) is None
    with pytest.raises(ValueError, match="scatter"):
        native.scatter(vals.double(), idx, 1000)


def test_float32_range_is_min_and_max_or_nan():
    """The wire-format check's one-pass range of a float32 header part (kernels.c): NaN
    anywhere makes both NaN; infinities and -0.0 come back as they are."""
    if native.library() is None:
        pytest.skip("no C compiler")
    for n in (1, 2, 9, 2048):
        x = torch.randn(n, generator=torch.Generator().manual_seed(n)) * 1e30
        assert native.float32_range(x) == (float(x.min()), float(x.max()))
        for bad in (math.nan, math.inf, -math.inf):
            y = x.clone()
            y[n // 2] = bad
            lo, hi = native.float32_range(y)
            if math.isnan(bad):
                assert math.isnan(lo) and math.isnan(hi)
            else:
                assert (lo, hi) == (float(y.min()), float(y.max()))


def test_expand_codes2_is_the_table_lookup():
    """TernGrad's C decoder equals the byte-table reference for every length (short last
    byte included), -0.0 where the scale is 0 as torch's products give it."""
    if native.library() is None:
        pytest.skip("no C compiler")
    from lab.compress.packing import expand_codes, pack_uint
    for n in (0, 1, 3, 4, 5, 1001):
        codes = torch.randint(0, 4, (n,), generator=torch.Generator().manual_seed(n))
        packed = pack_uint(codes, 2)
        for s in (0.0, 0.7, 3e38):
            table = torch.tensor([0.0, 1.0, -1.0, 0.0]) * torch.tensor(s)
            want = expand_codes(packed, n, 2, table)
            got = native.expand_codes2(packed, n, (0.0 * s, s, -1.0 * s, 0.0 * s))
            assert torch.equal(got.view(torch.int32), want.view(torch.int32))
