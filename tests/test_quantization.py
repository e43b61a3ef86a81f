"""Quantization codecs (Chapter 4): properties from the papers, exact wire sizes, edge cases."""
from __future__ import annotations

import itertools
import math

import pytest
import torch

import lab.compress as C
from lab.comm import Collective
from lab.compress.onebit import OneBit
from lab.compress.qsgd import QSGD
from lab.compress.qsgd_elias import QSGDElias, elias_gamma_decode_qsgd, elias_gamma_encode
from lab.compress.terngrad import TernGrad
from lab.compress.zipml import ZipML, optimal_points
from lab.compress.packing import unpack_bits

CODECS = ["sign", "scaled_sign", "efsgd", "onebit", "onebit_sgd", "terngrad", "qsgd",
          "qsgd_elias", "zipml"]
DETERMINISTIC = ["sign", "scaled_sign", "onebit"]


def roundtrip(codec, x, key=None):
    payload, ctx = codec.compress(x, key)
    return codec.decompress(payload, ctx), payload


def nbytes(payload):
    return C.wire_bytes(payload)


# -- contract: every codec, every awkward input ----------------------------------------------

@pytest.mark.parametrize("name", CODECS)
def test_registered_and_default_constructible(name):
    assert name in C.names()
    codec = C.make(name)
    assert isinstance(codec, C.Compressor)
    assert not codec.allreduce_compatible  # all of these travel by allgather or a server
    repr(codec)


def _inputs():
    g = torch.Generator().manual_seed(1)
    return {
        "empty": torch.zeros(0),
        "one": torch.tensor([-0.75]),
        "transposed": torch.randn(7, 5, generator=g).t(),  # not contiguous
        "fp16": torch.randn(300, generator=g).half(),
        "bf16": torch.randn(300, generator=g).bfloat16(),
        "zeros": torch.zeros(33),
    }


@pytest.mark.parametrize("name", CODECS)
@pytest.mark.parametrize("case", list(_inputs()))
def test_awkward_inputs(name, case):
    x = _inputs()[case]
    y, payload = roundtrip(C.make(name), x)
    assert y.shape == x.shape and y.dtype == x.dtype
    assert torch.isfinite(y.float()).all()
    if case == "zeros" and name != "sign":
        assert (y == 0).all()  # nothing invented from nothing
    if case == "one" and name in ("sign", "scaled_sign", "onebit", "efsgd", "onebit_sgd"):
        assert y.item() == (-1.0 if name == "sign" else -0.75)
    if case == "transposed" and name in DETERMINISTIC:
        ref, _ = roundtrip(C.make(name), x.contiguous())
        assert torch.equal(y, ref)


@pytest.mark.parametrize("name", CODECS)
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_nan_and_inf_refused(name, bad):
    x = torch.randn(50)
    x[7] = bad
    with pytest.raises(FloatingPointError):
        C.make(name).compress(x)


@pytest.mark.parametrize("name", CODECS)
def test_non_float_refused(name):
    with pytest.raises(TypeError):
        C.make(name).compress(torch.arange(10))


@pytest.mark.parametrize("name", CODECS)
def test_any_rank_decodes_any_payload(name):
    """Without allreduce compatibility, ctx may hold only what all ranks share."""
    x, other = torch.randn(2, 700, generator=torch.Generator().manual_seed(3))
    sender, receiver = C.make(name).bind(1, 2), C.make(name).bind(0, 2)
    payload, ctx = sender.compress(x, "w")
    _, my_ctx = receiver.compress(other, "w")
    assert torch.equal(receiver.decompress(payload, my_ctx), sender.decompress(payload, ctx))


@pytest.mark.parametrize("make, arg, exc", [
    (lambda: QSGD(s=0), "s", ValueError),
    (lambda: QSGD(s=2.5), "s", TypeError),
    (lambda: QSGD(s=True), "s", TypeError),
    (lambda: QSGD(bucket_size=0), "bucket_size", ValueError),
    (lambda: QSGDElias(s=-1), "s", ValueError),
    (lambda: OneBit(bucket_size=0), "bucket_size", ValueError),
    (lambda: OneBit(per_column=1), "per_column", TypeError),
    (lambda: TernGrad(clip=-1.0), "clip", ValueError),
    (lambda: TernGrad(clip="2.5"), "clip", TypeError),
    (lambda: ZipML(levels=1), "levels", ValueError),
    (lambda: ZipML(candidates=64.0), "candidates", TypeError),
    (lambda: C.make("qsgd", s=0), "s", ValueError),
])
def test_bad_arguments_name_the_argument(make, arg, exc):
    with pytest.raises(exc, match=rf"\b{arg}\b"):
        make()


# -- exact wire sizes -------------------------------------------------------------------------

@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 1000, 1001])
def test_payload_sizes(n):
    x = torch.randn(n, generator=torch.Generator().manual_seed(n))
    signs = math.ceil(n / 8)
    assert nbytes(roundtrip(C.make("sign"), x)[1]) == signs            # 1 bit, not 1 byte
    assert nbytes(roundtrip(C.make("scaled_sign"), x)[1]) == signs + 4
    assert nbytes(roundtrip(C.make("efsgd"), x)[1]) == signs + 4
    assert nbytes(roundtrip(C.make("onebit"), x)[1]) == signs + 8 * (n > 0)
    assert nbytes(roundtrip(OneBit(bucket_size=100), x)[1]) == signs + 8 * math.ceil(n / 100)
    assert nbytes(roundtrip(C.make("terngrad"), x)[1]) == math.ceil(2 * n / 8) + 4
    for s, bits in [(1, 1), (3, 2), (15, 4), (16, 5), (255, 8)]:
        p = roundtrip(QSGD(s=s, bucket_size=64), x)[1]
        assert nbytes(p) == 4 * math.ceil(n / 64) + signs + math.ceil(n * bits / 8)
    if n:
        for k, bits in [(2, 1), (4, 2), (5, 3), (16, 4)]:
            p = roundtrip(ZipML(levels=k), x)[1]
            assert p[0].numel() <= k and nbytes(p) == 4 * p[0].numel() + math.ceil(n * bits / 8)


def test_onebit_per_column_payload():
    x = torch.randn(6, 4)
    y, p = roundtrip(OneBit(per_column=True), x)
    assert nbytes(p) == math.ceil(24 / 8) + 8 * 4  # two float32 means per column
    pos = x >= 0
    mean_pos = (x * pos).sum(0) / pos.sum(0).clamp(min=1)  # per column, as in the paper
    mean_neg = (x * ~pos).sum(0) / (~pos).sum(0).clamp(min=1)
    assert torch.allclose(y, torch.where(pos, mean_pos, mean_neg), atol=1e-6)


# -- sign-like codecs -------------------------------------------------------------------------

def test_sign_of_zero_is_plus_one_and_packed():
    x = torch.tensor([0.0, -0.0, 2.0, -3.0, 1e-30, -1e-30])
    y, (packed,) = roundtrip(C.make("sign"), x)
    assert y.tolist() == [1.0, 1.0, 1.0, -1.0, 1.0, -1.0]  # zeros are not dropped
    assert packed.dtype == torch.uint8 and packed.numel() == 1


def test_scaled_sign_preserves_l1_and_fp16_range():
    x = torch.randn(999)
    y, _ = roundtrip(C.make("scaled_sign"), x)
    assert torch.allclose(y.abs().sum(), x.abs().sum(), rtol=1e-5)
    assert torch.equal(torch.sign(y), torch.where(x >= 0, 1.0, -1.0))
    big = torch.full((4096,), 60000.0, dtype=torch.float16)  # the l1 sum overflows fp16
    assert torch.equal(roundtrip(C.make("scaled_sign"), big)[0], big)


def test_onebit_reconstructs_with_the_two_means():
    x = torch.tensor([3.0, 1.0, -2.0, 0.0, -4.0])
    y, _ = roundtrip(C.make("onebit"), x)
    assert y.tolist() == pytest.approx([4 / 3, 4 / 3, -3.0, 4 / 3, -3.0])  # 0 is a positive
    y, _ = roundtrip(OneBit(bucket_size=2), x)
    assert y.tolist() == [2.0, 2.0, -2.0, 0.0, -4.0]


@pytest.mark.parametrize("name, kw", [("onebit_sgd", {}), ("onebit_sgd", {"per_column": True}),
                                      ("efsgd", {})])
def test_error_feedback_identity(name, kw):
    """g + e_old = D(C(g + e_old)) + e_new, step after step, and the residual starts at 0."""
    codec = C.make(name, **kw)
    gen = torch.Generator().manual_seed(5)
    assert codec.residual("w") is None
    for _ in range(5):
        g = torch.randn(3, 100, generator=gen)
        e_old = codec.residual("w")
        e_old = torch.zeros_like(g) if e_old is None else e_old
        sent, _ = roundtrip(codec, g, "w")
        assert torch.allclose(g + e_old, sent + codec.residual("w"), atol=1e-6)
        assert not torch.equal(codec.residual("w"), torch.zeros_like(g))


def test_ef_sgd_fixes_signsgd_counterexample():
    """Karimireddy et al. (ICML 2019, Sec. 3 counterexample): f = (a1.x)^2 + (a2.x)^2 with
    a1 = (1, -1+eps), a2 = (-1+eps, 1), one term's gradient per step. Every sign step is
    +-(1, -1), so signSGD (and the scaled sign without memory) never leaves the line
    x1 + x2 = 2, where f >= 0.5; EF-SGD converges to the optimum x = 0."""
    eps, lr, steps = 0.5, 0.1, 400
    a = torch.tensor([[1.0, -1 + eps], [-1 + eps, 1.0]], dtype=torch.float64)

    def run(name):
        codec, x = C.make(name), torch.tensor([1.0, 1.0], dtype=torch.float64)
        gen = torch.Generator().manual_seed(0)
        for _ in range(steps):
            i = int(torch.randint(2, (1,), generator=gen))
            g = 2 * (a[i] @ x) * a[i]
            x = x - lr * roundtrip(codec, g.float(), "x")[0].double()
        return x, float(((a @ x) ** 2).sum())

    for name in ("sign", "scaled_sign"):
        x, f = run(name)
        assert abs(float(x.sum()) - 2.0) < 1e-9 and f >= 0.5
    x, f = run("efsgd")
    assert f < 1e-6 and float(x.norm()) < 1e-3


# -- unbiased stochastic quantisers -----------------------------------------------------------

def _mc_copies(codec, v, reps):
    """Quantise ``reps`` copies of v in one call: each copy is an independent sample."""
    y, _ = roundtrip(codec, v.repeat(reps))
    return y.view(reps, -1).double()


def _assert_unbiased(samples, v, z=5.0):
    mean, se = samples.mean(0), samples.std(0) / math.sqrt(samples.shape[0])
    assert ((mean - v.double()).abs() <= z * se + 1e-6).all()


def test_qsgd_unbiased():
    v = torch.randn(64, generator=torch.Generator().manual_seed(7))
    _assert_unbiased(_mc_copies(QSGD(s=2, bucket_size=64, seed=1), v, 20000), v)


def test_terngrad_unbiased_without_clipping():
    v = torch.randn(64, generator=torch.Generator().manual_seed(8))
    samples = _mc_copies(TernGrad(clip=None, seed=2), v, 20000)
    _assert_unbiased(samples, v)
    s = v.abs().max().item()
    assert set(samples.unique().tolist()) <= {-s, 0.0, s}


def test_terngrad_clipping_bounds_the_scaler():
    v = torch.randn(1000, generator=torch.Generator().manual_seed(9))
    v[0] = 50.0  # an outlier that would set s alone
    y, p = roundtrip(TernGrad(), v)
    sigma = v.std(unbiased=False).item()
    assert p[0].item() == pytest.approx(2.5 * sigma, rel=1e-6)
    assert y.abs().max().item() <= 2.5 * sigma * (1 + 1e-6)


def test_zipml_unbiased():
    v = torch.randn(64, generator=torch.Generator().manual_seed(10)) ** 3  # heavy tails
    _assert_unbiased(_mc_copies(ZipML(levels=4, seed=3), v, 20000), v)


def test_qsgd_variance_bound():
    """E||Q(v) - v||^2 <= min(n/s^2, sqrt(n)/s) ||v||^2 (Alistarh et al., Lemma 3.1)."""
    n, reps = 64, 4000
    gen = torch.Generator().manual_seed(11)
    for v in (torch.randn(n, generator=gen), torch.ones(n), torch.rand(n, generator=gen) ** 4):
        for s in (1, 2, 4, 16):
            samples = _mc_copies(QSGD(s=s, bucket_size=n, seed=s), v, reps)
            mse = ((samples - v.double()) ** 2).sum(1).mean().item()
            r = v.double().abs() / v.double().norm() * s
            exact = ((v.double().norm() / s) ** 2 * (r - r.floor()) * (1 - r + r.floor())).sum()
            bound = min(n / s ** 2, math.sqrt(n) / s) * v.double().norm().item() ** 2
            assert mse == pytest.approx(exact.item(), rel=0.1, abs=1e-9)
            assert mse <= bound * 1.05


def test_zipml_points_are_optimal():
    """The DP matches a brute-force search over all K-subsets of the candidates, and beats
    evenly spaced points (the fixed grid of plain stochastic rounding)."""
    x = torch.randn(300, generator=torch.Generator().manual_seed(12)) ** 3

    def variance(points):
        p = points.double()
        lo = (torch.searchsorted(p, x.double(), right=True) - 1).clamp(0, p.numel() - 2)
        return float(((p[lo + 1] - x) * (x - p[lo])).sum())

    xs = x.sort().values
    cand = torch.unique(xs[torch.linspace(0, 299, 14, dtype=torch.float64).round().long()])
    best = min(variance(torch.stack([cand[0], *cand[list(mid)], cand[-1]]))
               for mid in itertools.combinations(range(1, cand.numel() - 1), 3))
    points = optimal_points(x, 5, 14)
    assert points[0] == x.min() and points[-1] == x.max()
    assert variance(points) == pytest.approx(best, rel=1e-9)
    uniform = torch.linspace(float(x.min()), float(x.max()), 5)
    assert variance(points) < 0.5 * variance(uniform)


# -- Elias coding -----------------------------------------------------------------------------

def _bitstring(stream, nbits):
    return "".join("1" if b else "0" for b in unpack_bits(stream, nbits).tolist())


def test_elias_gamma_codes():
    assert _bitstring(elias_gamma_encode(torch.tensor([1])), 1) == "1"
    assert _bitstring(elias_gamma_encode(torch.tensor([2, 5])), 8) == "010" + "00101"
    raw = torch.tensor([False, True, False])
    assert _bitstring(elias_gamma_encode(torch.tensor([3, 0, 1]), raw), 5) == "011" + "0" + "1"
    with pytest.raises(ValueError):
        elias_gamma_encode(torch.tensor([0]))


def test_elias_roundtrip_random():
    gen = torch.Generator().manual_seed(13)
    t = torch.stack([torch.randint(1, 5000, (500,), generator=gen),
                     torch.randint(0, 2, (500,), generator=gen),
                     torch.randint(1, 70, (500,), generator=gen)], dim=1)
    raw = torch.tensor([False, True, False]).expand_as(t)
    # the stream starts with the count + 1, then the triples
    stream = elias_gamma_encode(torch.cat([torch.tensor([501]), t.reshape(-1)]),
                                torch.cat([torch.tensor([False]), raw.reshape(-1)]))
    bits = sum(2 * int(k).bit_length() - 1 for k in t[:, [0, 2]].reshape(-1)) + 500
    bits += 2 * (501).bit_length() - 1
    assert stream.numel() == math.ceil(bits / 8)
    assert elias_gamma_decode_qsgd(stream) == [(a, bool(b), c) for a, b, c in t.tolist()]
    with pytest.raises(ValueError, match="past the stream's end|after the last code"):
        elias_gamma_decode_qsgd(stream[:-1])  # cut short: named, never decoded silently


@pytest.mark.parametrize("s", [1, 2, 7])
def test_qsgd_elias_decodes_exactly_and_is_smaller(s):
    x = torch.randn(5000, generator=torch.Generator().manual_seed(14))
    plain, elias = QSGD(s=s, bucket_size=512, seed=4), QSGDElias(s=s, bucket_size=512, seed=4)
    y_plain, p_plain = roundtrip(plain, x)
    y_elias, p_elias = roundtrip(elias, x)
    assert torch.equal(y_plain, y_elias)  # same random draws, lossless coding
    nz = y_plain.nonzero().reshape(-1)
    gaps = torch.diff(nz, prepend=torch.tensor([-1]))
    levels = (y_plain[nz].abs() / torch.repeat_interleave(p_plain[0], 512)[nz] * s).round()
    bits = sum(2 * int(k).bit_length() - 1 for k in torch.cat([gaps, levels.long()])) + nz.numel()
    bits += 2 * (nz.numel() + 1).bit_length() - 1  # the count of nonzeros, + 1, comes first
    assert p_elias[1].numel() == math.ceil(bits / 8)
    if s <= 2:  # the sparse regime, where coding pays
        assert nbytes(p_elias) < nbytes(p_plain)


# -- aggregators in a world of one: argument checks and NaN refusal ---------------------------

@pytest.mark.parametrize("name, kw, arg, exc", [
    ("signum", {"beta": 1.0}, "beta", ValueError),
    ("signum", {"beta": "0.9"}, "beta", TypeError),
    ("dist_ef_sgd", {"block_size": 0}, "block_size", ValueError),
    ("dist_ef_sgd", {"momentum": -0.1}, "momentum", ValueError),
    ("terngrad_shared", {"clip": 0}, "clip", ValueError),
])
def test_aggregator_bad_arguments(name, kw, arg, exc):
    from lab import aggregate
    with pytest.raises(exc, match=rf"\b{arg}\b"):
        aggregate.make(name, Collective(), **kw)


@pytest.mark.parametrize("name", ["majority_vote", "signum", "dist_ef_sgd", "terngrad_shared"])
def test_aggregators_refuse_nan_and_keep_dtype(name):
    from lab import aggregate
    agg = aggregate.make(name, Collective())
    grads = [torch.randn(4, 3).bfloat16(), torch.zeros(0).bfloat16(), torch.randn(5).bfloat16()]
    out = agg.aggregate(grads, step=0)
    assert [(o.shape, o.dtype) for o in out] == [(g.shape, g.dtype) for g in grads]
    grads[2][1] = float("nan")
    with pytest.raises(FloatingPointError):
        agg.aggregate(grads, step=1)
