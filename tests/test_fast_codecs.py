"""Fast codec paths (issue 8): each equals its readable reference, randomness where the tensor
lives, no NaN on huge inputs. Speed itself is measured by ``python -m lab bench codecs``."""
from __future__ import annotations

import contextlib

import pytest
import torch

import lab.compress as C
from lab.compress.base import _carry, bernoulli, random_bytes, round_stochastic
from lab.compress.onebit import OneBit
from lab.compress.packing import (expand_codes, pack_bits, pack_bits_reference, pack_uint, pack_uint_reference,
                                  unpack_bits, unpack_bits_reference, unpack_uint,
                                  unpack_uint_reference)
from lab.compress.qsgd import QSGD, bucket_norms, dequantize, quantize, sums_of_squares
from lab.compress.sign import set_sign, signs_from_bits
from lab.compress.terngrad import TernGrad, std, ternary_values

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


# -- bit packing: fast == reference, bit for bit ----------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 1001])
def test_pack_bits_equals_reference(n, device):
    m = (torch.rand(n, generator=gen(n)) < 0.5).to(device)
    fast = pack_bits(m)
    assert torch.equal(fast.cpu(), pack_bits_reference(m.cpu()))
    assert torch.equal(unpack_bits(fast, n).cpu(), m.cpu())
    assert torch.equal(unpack_bits_reference(fast.cpu(), n), m.cpu())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bits", [1, 2, 3, 4, 5, 8, 12, 16, 31, 32])
def test_pack_uint_equals_reference(bits, device):
    for n in (0, 1, 5, 333):
        codes = torch.randint(0, 2 ** bits, (n,), generator=gen(bits + n), dtype=torch.int64)
        fast = pack_uint(codes.to(device), bits)
        assert torch.equal(fast.cpu(), pack_uint_reference(codes, bits))
        assert torch.equal(unpack_uint(fast, n, bits).cpu(), codes)
        assert torch.equal(unpack_uint_reference(fast.cpu(), n, bits), codes)


def test_pack_uint_range_check_holds_for_narrow_dtypes():
    with pytest.raises(ValueError, match="codes must lie"):
        pack_uint(torch.tensor([255], dtype=torch.uint8), 7)
    assert pack_uint(torch.tensor([255], dtype=torch.uint8), 8).item() == 255


# -- sign decoding by bit pattern == torch.where -----------------------------------------------

def test_set_sign_equals_where():
    mag = torch.rand(1000, generator=gen()) * 10
    mag[::7] = 0.0
    neg = torch.rand(1000, generator=gen(1)) < 0.5
    assert torch.equal(set_sign(mag.clone(), neg), torch.where(neg, -mag, mag))
    bits = pack_bits(neg)
    assert torch.equal(signs_from_bits(bits, 1000), unpack_bits_reference(bits, 1000).float() * 2 - 1)


def test_ternary_values_equal_the_table():
    codes = torch.tensor([0, 1, 2, 2, 1, 0], dtype=torch.uint8)
    assert torch.equal(ternary_values(codes), torch.tensor([0.0, 1.0, -1.0])[codes.long()])


# -- randomness: bytes uniform, Bernoulli exact (the tie path included) ------------------------

def test_random_bytes_are_uniform():
    b = random_bytes(256 * 400, gen(), "cpu")
    counts = torch.bincount(b.long(), minlength=256).double()
    chi2 = ((counts - 400) ** 2 / 400).sum().item()
    assert chi2 < 255 + 6 * (2 * 255) ** 0.5  # chi-square with 255 dof, ~6 sigma


@pytest.mark.parametrize("device", DEVICES)
def test_bernoulli_probability_is_exact(device):
    """P(True) = p, also for p between two multiples of 1/256 (decided by the tie draw)."""
    n = 400_000
    g = C.make("qsgd").generator_for(device)
    for p in (0.0, 1.0, 0.5, 1 / 512, 3.3 / 256, 0.7, 255.5 / 256):  # the last: tie at byte 255
        got = bernoulli(torch.full((n,), p, device=device), g).float().mean().item()
        sigma = (p * (1 - p) / n) ** 0.5
        assert abs(got - p) <= 5 * sigma + 1e-12, (p, got)


@pytest.mark.parametrize("device", DEVICES)
def test_round_stochastic_is_exact_and_stays_at_or_below_top(device):
    """E[level] = r for r on, between and just off the 1/256 grid; the level is floor(r) or
    floor(r) + 1, never above ``top`` even where rounding put r a hair above it."""
    n, top = 200_000, 15
    g = C.make("qsgd").generator_for(device)
    for r in (0.0, 3.0, 7.5, 2 + 1 / 512, 4 + 255.5 / 256, 14.999, 15.0):
        levels = round_stochastic(torch.full((n,), 256 * r, device=device), top, g)
        assert levels.dtype == torch.uint8
        assert set(levels.unique().tolist()) <= {int(r), min(int(r) + 1, top)}
        frac = r - int(r)
        got = levels.double().mean().item()
        assert abs(got - r) <= 5 * (frac * (1 - frac) / n) ** 0.5 + 1e-12, (r, got)
    above = torch.full((n,), 256 * top * (1 + 2 ** -22), device=device)
    assert torch.equal(round_stochastic(above, top, g).cpu(), torch.full((n,), top, dtype=torch.uint8))


def test_carry_numpy_equals_torch():
    """the CPU's numpy carry and the torch one every other device runs give the same levels
    and ties (tested here on the CPU, so CI covers the GPU's logic)."""
    r256 = torch.rand(100_003, generator=gen()) * 256 * 15
    r256[:5] = torch.tensor([0.0, 255.0, 256.0, 3840.0, 3839.5])
    u = random_bytes(r256.numel(), gen(1), "cpu")
    for a, b in zip(_carry(r256, u, numpy=True), _carry(r256, u, numpy=False)):
        assert torch.equal(a, b)


def test_std_is_the_population_std():
    """the one-pass std equals a float64 two-pass one; a constant tensor has sigma 0."""
    for x in (torch.randn(3 * 2 ** 16 + 77, generator=gen()) * 3 + 0.2,
              torch.randn(10, generator=gen()) + 100, torch.tensor([1.0, 2.0])):
        assert std(x).item() == pytest.approx(x.double().std(unbiased=False).item(), rel=1e-5)
        assert sums_of_squares(x.view(1, -1)).item() == pytest.approx((x.double() ** 2).sum().item(), rel=1e-6)
    for c in (0.1, 3.0, -7e-5):
        assert std(torch.full((100_000,), c)).item() == 0.0


def test_terngrad_keeps_a_constant_tensor():
    """sigma of a constant tensor is 0, not its rounding noise: nothing is clipped away."""
    x = torch.full((10_000,), 0.1)
    y = TernGrad(seed=1).decompress(*TernGrad(seed=1).compress(x))
    assert torch.allclose(y, x)


# -- qsgd: same deterministic part as the plain formula; huge inputs ---------------------------

def test_qsgd_levels_round_the_reference_ratio():
    """levels are floor(r) or floor(r) + 1, r = s |v_i| / ||v|| computed the plain way."""
    x = torch.randn(5000, generator=gen())
    s, bucket = 7, 512
    norms, levels, neg = quantize(x, s, bucket, gen())
    ids = torch.arange(x.numel()) // bucket
    ref_norms = torch.stack([c.norm() for c in x.split(bucket)])
    assert torch.allclose(norms, ref_norms, rtol=1e-6)
    r = (x.abs() / norms[ids] * s).clamp(max=s)
    d = levels.long() - r.floor().long()
    assert set(d.unique().tolist()) <= {0, 1}
    assert torch.equal(neg, x < 0)
    out = dequantize(norms, levels, neg, s, bucket, x.numel())
    ref = torch.where(neg, -1.0, 1.0) * norms[ids] * levels.float() / s
    assert torch.allclose(out, ref, rtol=1e-6, atol=0)


@pytest.mark.parametrize("name", ["qsgd", "qsgd_elias"])
def test_qsgd_huge_inputs_give_no_nan(name):
    """||v||^2 of 1e30-sized values overflows float32: the norm is scaled first (issue 8)."""
    x = torch.randn(2000, generator=gen()) * 1e30
    codec = C.make(name)
    y = codec.decompress(*codec.compress(x))
    assert torch.isfinite(y).all()
    # a real quantisation, not garbage: Lemma 3.1's variance bound, with a factor 2 of slack
    err, size = (((y - x) / 1e30) ** 2).sum(), ((x / 1e30) ** 2).sum()
    n, s = codec.bucket_size, codec.s
    assert err <= 2 * min(n / s ** 2, n ** 0.5 / s) * size
    norms = bucket_norms(x.view(-1, 500))
    ref = torch.stack([(c.double() ** 2).sum().sqrt() for c in x.view(-1, 500)]).float()
    assert torch.allclose(norms, ref, rtol=1e-5)


def test_qsgd_norm_of_a_long_bucket_is_accurate():
    """one bucket of 2^20 values: torch's one-pass norm is ~1e-5 off there; ours is not."""
    x = torch.randn(2 ** 20, generator=gen()) + 0.3
    assert bucket_norms(x.view(1, -1)).item() == pytest.approx(x.double().norm().item(), rel=1e-6)


def test_qsgd_norm_beyond_float32_is_refused():
    x = torch.full((4,), 3e38)
    with pytest.raises(OverflowError, match="exceeds the float32 range"):
        QSGD(bucket_size=None).compress(x)


# -- onebit: the bucketed sums equal the index_add reference -----------------------------------

@pytest.mark.parametrize("bucket", [None, 100, 64])
def test_onebit_means_equal_reference(bucket):
    x = torch.randn(1000, generator=gen())
    codec = OneBit(bucket_size=bucket)
    payload, ctx = codec.compress(x)
    b = bucket or x.numel()
    ids = torch.arange(x.numel()) // b
    nb = int(ids[-1]) + 1
    pos = x >= 0
    ref = []
    for side in (pos, ~pos):
        s = torch.zeros(nb).index_add(0, ids, torch.where(side, x, 0.0))
        c = torch.zeros(nb).index_add(0, ids, side.float())
        ref.append(s / c.clamp(min=1))
    assert torch.equal(payload[0], pack_bits_reference(pos))
    assert torch.allclose(payload[1].view(-1, 2), torch.stack(ref, 1), rtol=1e-5, atol=1e-7)
    out = codec.decompress(payload, ctx)
    means = payload[1].view(-1, 2)
    assert torch.equal(out, torch.where(pos, means[ids, 0], means[ids, 1]))


def test_onebit_refuses_nan_inf_and_an_overflowing_sum():
    for bad in (float("nan"), float("inf"), -float("inf")):
        with pytest.raises(FloatingPointError, match="NaN or Inf"):
            OneBit().compress(torch.tensor([1.0, bad, -2.0]))
        with pytest.raises(FloatingPointError, match="NaN or Inf"):  # not in the first bucket
            OneBit(bucket_size=2).compress(torch.tensor([1.0, -1.0, -2.0, bad, 5.0, -5.0]))
    # on the CPU the sums are float64: 4 x 3e38 no longer overflows (float32 sums on a GPU
    # still would, and are refused there)
    assert torch.equal(OneBit().compress(torch.full((4,), 3e38))[0][1], torch.tensor([3e38, 0.0]))
    payload, _ = OneBit(bucket_size=2).compress(torch.tensor([3e38, -1.0, 3e38, 0.0]))
    assert torch.equal(payload[1], torch.tensor([3e38, -1.0, 1.5e38, 0.0]))  # per bucket: fine


# -- casts: one check on the output still catches everything -----------------------------------

def test_casts_check_their_output():
    with pytest.raises(OverflowError, match="fp16"):
        C.make("fp16").compress(torch.tensor([1.0, 7e4]))
    with pytest.raises(FloatingPointError, match="NaN or Inf"):
        C.make("bf16").compress(torch.tensor([1.0, float("nan")]))
    x = torch.randn(100, generator=gen())
    for name, dt in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        payload, ctx = C.make(name).compress(x)
        assert torch.equal(payload[0], x.to(dt))


# -- devices: a generator per device, seeded like the CPU one ----------------------------------

def test_cpu_generator_is_the_codec_generator():
    c = C.make("qsgd", seed=3).bind(rank=2, world_size=4)
    assert c.generator_for("cpu") is c.generator
    assert c.generator.initial_seed() == 3 + 2 * 1_000_003


class _FakeDeviceGenerator:
    """Stands in for a GPU generator on a machine without one: records device and seed."""
    def __init__(self, device):
        self.device, self.seed = torch.device(device), None

    def manual_seed(self, seed):
        self.seed = seed
        return self


def fake_device_generators(codec, *devices):
    """``codec.generator_for`` each device, with the stand-in generator for non-CPU ones."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(torch, "Generator", _FakeDeviceGenerator)
        return [codec.generator_for(d) for d in devices]


def test_device_generators_are_seeded_like_the_cpu_one():
    private = [C.make("qsgd", seed=5).bind(r, 2) for r in range(2)]
    shared = [C.make("randomk_shared", seed=5).bind(r, 2) for r in range(2)]
    for codec in private + shared:
        g, again, other, cpu = fake_device_generators(codec, "cuda:1", torch.device("cuda:1"),
                                                      "cuda:0", "cpu")
        assert g.device == torch.device("cuda:1") and g.seed == codec.generator.initial_seed()
        assert again is g  # one per device: its stream goes on
        assert other is not g
        assert cpu is codec.generator
    seed = {c: fake_device_generators(c, "cuda:0")[0].seed for c in private + shared}
    assert seed[private[0]] != seed[private[1]]
    assert seed[shared[0]] == seed[shared[1]]
    old, = fake_device_generators(private[0], "cuda:1")
    private[0].bind(1, 2)  # rebinding starts fresh streams, seeded for the new rank, everywhere
    new, = fake_device_generators(private[0], "cuda:1")
    assert new is not old and new.seed == private[1].generator.initial_seed()


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["qsgd", "terngrad", "zipml", "randomk", "randomk_shared",
                                  "wangni", "topk", "topk_sampled", "onebit", "sign", "fp16"])
def test_cuda_payloads_same_size_and_on_device(name):
    x = torch.randn(100_000, generator=gen())
    codec = C.make(name)
    cpu_payload, _ = codec.compress(x)
    payload, ctx = codec.compress(x.cuda())
    assert all(t.device.type == "cuda" for t in payload)
    if codec.fixed_size:
        assert C.wire_bytes(payload) == C.wire_bytes(cpu_payload)
    assert codec.decompress(payload, ctx).device.type == "cuda"


@pytest.mark.gpu
def test_cuda_shared_randomness_is_shared_and_private_is_private():
    x = torch.randn(50_000, generator=gen()).cuda()
    a, b = (C.make("randomk_shared").bind(r, 2) for r in (0, 1))
    assert torch.equal(a.compress(x)[1][2], b.compress(x)[1][2])  # same indices
    p, q = (C.make("qsgd").bind(r, 2) for r in (0, 1))
    assert a.generator_for("cuda").initial_seed() == b.generator_for("cuda").initial_seed()
    assert p.generator_for("cuda").initial_seed() != q.generator_for("cuda").initial_seed()


@pytest.mark.gpu
def test_cuda_topk_is_exact():
    x = torch.randn(1_000_000, generator=gen()).cuda()
    payload, _ = C.make("topk", density=0.01).compress(x)
    ref = torch.topk(x.abs(), 10_000).values
    assert torch.equal(payload[0].abs().sort().values, ref.sort().values)


# -- fused GPU cores: equal to their eager reference -------------------------------------------

def test_stochastic_levels_reference_is_the_plain_rule():
    from lab.compress.qsgd import stochastic_levels
    v = torch.randn(64, 512, generator=gen())
    norm = v.norm(dim=1, keepdim=True)
    u = torch.rand(v.shape, generator=gen(1))
    r = (v.abs() / norm * 15).clamp(max=15)
    want = r.floor() + (u < r - r.floor()).float()
    assert torch.equal(stochastic_levels(v, norm, u, 15, torch.uint8), want.to(torch.uint8))


@pytest.fixture
def fresh_fused(monkeypatch):
    """``fused`` compiling CPU tensors of any size, so CI (no GPU) runs the compiled code; each
    call gets a freshly wrapped core, leaving the library's own compile state alone."""
    from lab.compress import fused as F
    monkeypatch.setattr(F, "FUSE_DEVICES", {"cpu", "cuda"})
    monkeypatch.setattr(F, "FUSE_MIN_NUMEL", 1)
    monkeypatch.delenv("LAB_FUSE", raising=False)
    return lambda core: F.fused(core.reference)


def test_fused_cores_compiled_equal_their_reference(fresh_fused):
    from lab.compress.qsgd import stochastic_levels
    from lab.compress.terngrad import ternary_codes
    v = torch.randn(16, 1024, generator=gen()) * 3
    norm = v.norm(dim=1, keepdim=True)
    u = torch.rand(v.shape, generator=gen(1))
    for core, args in ((stochastic_levels, (v, norm, u, 15, torch.uint8)),
                       (ternary_codes, (v.reshape(-1), v.abs().max(), u.reshape(-1)))):
        f = fresh_fused(core)
        ref = core.reference(*args)
        assert torch.equal(f(*args), ref) and f.state["compiled"] is None  # first sighting: eager
        assert torch.equal(f(*args), ref)  # second: compiled, same bits
        assert f.state["compiled"] is not None and len(f.state["ready"]) == 1
        assert not f.state["failed"]


def test_fused_falls_back_to_the_reference_when_compiling_fails(fresh_fused, monkeypatch):
    from lab.compress.terngrad import ternary_codes

    def broken(fn, **kw):
        def run(*a):
            raise RuntimeError("no compiler here")
        return run
    monkeypatch.setattr(torch, "compile", broken)
    x = torch.randn(100, generator=gen())
    u = torch.rand(100, generator=gen(1))
    f = fresh_fused(ternary_codes)
    want = ternary_codes.reference(x, x.abs().max(), u)
    f(x, x.abs().max(), u)
    with pytest.warns(UserWarning, match="torch.compile failed"):
        assert torch.equal(f(x, x.abs().max(), u), want)
    assert f.state["failed"] and torch.equal(f(x, x.abs().max(), u), want)  # and stays eager


def test_fused_stays_eager_on_the_cpu_by_default():
    from lab.compress.qsgd import stochastic_levels
    v = torch.randn(1024, 512, generator=gen())  # above FUSE_MIN_NUMEL
    norm = v.norm(dim=1, keepdim=True)
    u = torch.rand(v.shape, generator=gen(1))
    for _ in range(3):
        stochastic_levels(v, norm, u, 15, torch.uint8)
    assert stochastic_levels.state["compiled"] is None and not stochastic_levels.state["ready"]


@pytest.mark.gpu
def test_fused_levels_equal_eager_on_cuda():
    from lab.compress.qsgd import stochastic_levels
    v = torch.randn(2048, 512, generator=gen()).cuda()
    norm = v.norm(dim=1, keepdim=True)
    u = torch.rand(v.shape, generator=gen(1)).cuda()
    stochastic_levels(v, norm, u, 15, torch.uint8)  # compiled from the second call on
    fast = stochastic_levels(v, norm, u, 15, torch.uint8)
    ref = stochastic_levels.reference(v, norm, u, 15, torch.uint8)
    assert (fast.int() - ref.int()).abs().max() <= 1
    assert (fast != ref).float().mean() < 1e-5  # at most a last-ulp difference at a boundary


@pytest.mark.gpu
def test_large_packing_equals_reference_on_cuda():
    n = 2 ** 20 + 5
    m = torch.rand(n, generator=gen()) < 0.5
    assert torch.equal(pack_bits(m.cuda()).cpu(), pack_bits_reference(m))
    assert torch.equal(unpack_bits(pack_bits(m.cuda()), n).cpu(), m)
    for bits in (2, 4):
        codes = torch.randint(0, 2 ** bits, (n,), generator=gen(bits))
        packed = pack_uint(codes.cuda(), bits)
        assert torch.equal(packed.cpu(), pack_uint_reference(codes, bits))
        assert torch.equal(unpack_uint(packed, n, bits).cpu(), codes)


@pytest.mark.gpu
def test_cuda_terngrad_unbiased():
    from lab.compress.terngrad import TernGrad
    x = torch.randn(2 ** 18, generator=gen()).cuda()
    codec = TernGrad(clip=None)
    mean = sum(codec.decompress(*codec.compress(x)) for _ in range(200)) / 200
    s = x.abs().max()
    sigma = (s * x.abs() - x ** 2).clamp(min=0).sqrt() / 200 ** 0.5  # per-entry std of the mean
    assert ((mean - x).abs() <= 6 * sigma + 1e-6).float().mean() > 0.999


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bits", [1, 2, 4, 8])
@pytest.mark.parametrize("n", [0, 1, 5, 1001])
def test_expand_codes_equals_unpack_and_index(bits, n, device):
    """Decoding by a byte table gives values[code] for every code, the padding ignored."""
    codes = torch.randint(0, 2 ** bits, (n,), generator=gen(bits))
    values = torch.randn(2 ** bits, generator=gen(7))
    packed = pack_uint(codes.to(device), bits)
    got = expand_codes(packed, n, bits, values.to(device))
    assert got.shape == (n,) and torch.equal(got.cpu(), values[codes])



@pytest.mark.parametrize("name", ["sign", "scaled_sign", "efsgd", "onebit", "terngrad", "qsgd",
                                  "threshold", "topk", "randomk_private", "dgc", "wangni",
                                  "gradient_dropping"])
@pytest.mark.parametrize("shape", [(1,), (9,), (1000,), (40, 25)])
def test_small_tensor_decoders_equal_the_reference(name, shape):
    """The small-tensor paths (two values as floats into the C expander, TernGrad's C table
    lookup, the C scatter that checks each index) decode a payload to the same bits as the torch reference, and a
    valid payload of any shape passes; an index out of range is named by both."""
    from lab.compress import PayloadError, native
    x = torch.randn(shape, generator=gen(len(shape) + shape[0]))
    codec = C.make(name)
    payload, ctx = codec.compress(x, key="w")
    fast = codec.decompress(payload, ctx)
    with native.reference():
        ref = codec.decompress(payload, ctx)
    assert fast.shape == x.shape and torch.equal(fast.view(torch.int32), ref.view(torch.int32))
    parts = [p.name for p in codec.wire.parts]
    if "indices" in parts and payload[parts.index("indices")].numel():
        bad = list(payload)
        i = parts.index("indices")
        bad[i] = bad[i].clone()
        bad[i][-1] = x.numel()
        for mode in (contextlib.nullcontext(), native.reference()):
            with mode, pytest.raises(PayloadError, match="'indices'.*got entries"):
                codec.decompress(tuple(bad), ctx)


def test_bench_tables_have_their_columns():
    """``python -m lab bench codecs --checks`` and ``--small``: one row per codec and size."""
    from lab.bench import codecs as bench
    rows = bench.check_overhead(["topk", "sign"], sizes=(1000,), repeats=1)
    assert [r["codec"] for r in rows] == ["topk", "sign"]
    assert all(r["check us"] > 0 and r["full check us"] > 0 and r["decode ms"] > 0 for r in rows)
    rows = bench.small_overhead(["sign"], sizes=(100, 1000), repeats=1, number=2)
    assert [(r["codec"], r["elements"]) for r in rows] == [("sign", 100), ("sign", 1000)]
    assert all(r["compress us"] > 0 and r["decompress us"] > 0 for r in rows)


def test_device_path_of_the_stochastic_quantizers_runs_on_the_cpu(monkeypatch):
    """The path QSGD and TernGrad take on a GPU (uniforms drawn where the tensor lives, then the
    fused core) is the same code on any device in ``FUSE_DEVICES``: CI runs it on the CPU, with
    the cores eager (their compiled form is tested equal above). Unbiased, by Monte Carlo, and
    repeatable from the generator's seed."""
    from lab.compress import fused as F, qsgd as Q, terngrad as T
    monkeypatch.setattr(F, "FUSE_DEVICES", {"cpu", "cuda"})
    monkeypatch.setenv("LAB_FUSE", "0")
    calls = []
    for mod, core in ((Q, "stochastic_levels"), (T, "ternary_codes")):
        real = getattr(mod, core)
        monkeypatch.setattr(mod, core, lambda *a, _r=real, _n=core: calls.append(_n) or _r(*a))
    x, draws = torch.randn(4096, generator=gen()), 300
    g = torch.Generator().manual_seed(1)
    qs = [Q.quantize(x, 4, 512, g) for _ in range(draws)]
    norms = qs[0][0].repeat_interleave(512)[:x.numel()]
    mean = sum(lv.float() * norms / 4 for _, lv, _ in qs) / draws * torch.where(qs[0][2], -1.0, 1.0)
    assert ((mean - x).abs() <= 6 * norms / 8 / draws ** 0.5 + 1e-6).float().mean() > 0.999
    s = x.abs().max()
    codes = [T.ternarize(x, s, g) for _ in range(draws)]
    tmean = sum(T.ternary_values(c) for c in codes) / draws * s
    sigma = (s * x.abs() - x ** 2).clamp(min=0).sqrt() / draws ** 0.5
    assert ((tmean - x).abs() <= 6 * sigma + 1e-6).float().mean() > 0.999
    assert calls.count("stochastic_levels") == draws and calls.count("ternary_codes") == draws
    again = [Q.quantize(x, 4, 512, torch.Generator().manual_seed(s_))[1] for s_ in (5, 5)]
    assert torch.equal(*again)
