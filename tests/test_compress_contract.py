"""The compressor contract, run over every registered codec (present and future)."""
import pytest
import torch

from lab import compress
from lab.comm import Collective
from lab.compress import ErrorFeedback, make, wire_bytes
from lab.compress.packing import index_dtype, pack_bits, pack_uint, packed_size, unpack_bits, unpack_uint

NAMES = compress.names()


def _grad(n=1000, seed=0, dtype=torch.float32):
    return torch.randn(n, generator=torch.Generator().manual_seed(seed)).to(dtype)


@pytest.mark.parametrize("name", NAMES)
def test_round_trip_keeps_shape_and_dtype(name):
    for shape in [(1000,), (20, 50), (3, 4, 5)]:
        g = torch.randn(shape, generator=torch.Generator().manual_seed(1))
        c = make(name)
        payload, ctx = c.compress(g, key="w")
        out = c.decompress(payload, ctx)
        assert out.shape == g.shape and out.dtype == g.dtype
        assert torch.isfinite(out).all()
        assert all(isinstance(t, torch.Tensor) for t in payload)


@pytest.mark.parametrize("name", NAMES)
def test_ledger_bytes_equal_payload_bytes(name):
    c = make(name)
    payload, _ = c.compress(_grad(), key="w")
    comm = Collective()
    comm.world_size = 2  # account as if distributed, without a process group
    comm._run("allgather", "grad", wire_bytes(payload), lambda: None)
    assert comm.ledger.total_bytes() == wire_bytes(payload) > 0


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_output(name):
    a, b = make(name), make(name)
    pa, ca = a.compress(_grad(), key="w")
    pb, cb = b.compress(_grad(), key="w")
    assert torch.equal(a.decompress(pa, ca), b.decompress(pb, cb))


@pytest.mark.parametrize("name", [n for n in NAMES if make(n).allreduce_compatible])
def test_declared_allreduce_compatibility_really_holds(name):
    """Summing two ranks' payloads part by part and decoding gives the sum of the decodes."""
    c0, c1 = make(name).bind(0, 2), make(name).bind(1, 2)
    p0, x0 = c0.compress(_grad(seed=1), key="w")
    p1, x1 = c1.compress(_grad(seed=2), key="w")
    summed = tuple(a.to(torch.float64) + b.to(torch.float64) for a, b in zip(p0, p1))
    summed = tuple(s.to(a.dtype) for s, a in zip(summed, p0))
    both = c0.decompress(summed, x0)
    assert torch.allclose(both, c0.decompress(p0, x0) + c1.decompress(p1, x1), atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("name", NAMES)
def test_nan_and_inf_are_refused_not_erased(name):
    for bad in (float("nan"), float("inf")):
        g = _grad()
        g[7] = bad
        with pytest.raises(FloatingPointError):
            make(name).compress(g)


@pytest.mark.parametrize("name", NAMES)
def test_integer_input_is_refused(name):
    with pytest.raises(TypeError, match="floating point"):
        make(name).compress(torch.arange(10))


@pytest.mark.parametrize("inner", ["none", "fp16", "bf16"])
def test_error_feedback_identity(inner):
    """g + e_old = D(C(g + e_old)) + e_new, exactly, at every step; e starts at zero."""
    ef = ErrorFeedback(inner)
    assert ef.residual("w") is None
    for step in range(5):
        g = _grad(seed=step) * 1e3
        e_old = ef.residual("w") if step else torch.zeros_like(g)
        payload, ctx = ef.compress(g, key="w")
        sent = ef.decompress(payload, ctx)
        assert torch.equal(g + e_old, sent + ef.residual("w"))


def test_unknown_codec_name_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown compressor 'fp61'.*did you mean 'fp16'"):
        make("fp61")
    with pytest.raises(TypeError, match="'qsgd': unknown argument 'bucket'; did you mean 'bucket_size'"):
        make("qsgd", bucket=64)


def test_fp16_refuses_overflow_instead_of_making_inf():
    with pytest.raises(OverflowError, match="fp16"):
        make("fp16").compress(torch.tensor([1e6, 1.0]))


def test_bit_packing_is_exact_and_tight():
    g = torch.Generator().manual_seed(0)
    for n in (0, 1, 7, 8, 9, 1000):
        m = torch.rand(n, generator=g) > 0.5
        packed = pack_bits(m)
        assert packed.numel() == packed_size(n) == (n + 7) // 8
        assert torch.equal(unpack_bits(packed, n), m)
    for bits in (1, 2, 3, 5, 8, 12):
        codes = torch.randint(0, 2 ** bits, (101,), generator=g)
        packed = pack_uint(codes, bits)
        assert packed.numel() == packed_size(101, bits)
        assert torch.equal(unpack_uint(packed, 101, bits), codes)
    with pytest.raises(ValueError, match="bits"):
        pack_uint(torch.tensor([4]), 2)
    assert index_dtype(10) == torch.int32 and index_dtype(2 ** 31) == torch.int64


@pytest.mark.parametrize("name", [n for n in NAMES if make(n).fixed_size])
def test_declared_fixed_size_payloads_do_not_depend_on_the_values(name):
    """Peers skip the size exchange for these codecs, so the sizes must really be fixed."""
    sizes = set()
    for seed, scale in [(0, 1.0), (1, 1e-3), (2, 1e3)]:
        g = _grad(seed=seed) * scale
        g[:100] = 0.0  # zeros and ties too
        payload, _ = make(name).compress(g, key="w")
        sizes.add(tuple(t.numel() for t in payload))
    assert len(sizes) == 1


@pytest.mark.parametrize("name", ["scaled_sign", "qsgd", "terngrad"])
def test_codecs_that_check_through_their_reduction_still_refuse_one_bad_value(name):
    """These codecs skip the separate finiteness pass (``checks_finite``): one NaN or Inf
    among many finite values must still be refused, in fp32 and fp16."""
    for dtype in (torch.float32, torch.float16):
        for bad in (float("nan"), float("inf"), float("-inf")):
            t = torch.randn(4099).to(dtype)
            t[4000] = bad
            with pytest.raises(FloatingPointError, match="NaN or Inf"):
                make(name).compress(t)


def test_scaled_sign_scale_survives_an_overflowing_l1_sum():
    """|x| summed in float32 overflows for 1e6 values of 1e33; the mean (1e33) does not."""
    t = torch.full((10 ** 6,), 1e33)
    payload, ctx = make("scaled_sign").compress(t)
    assert torch.allclose(payload[1], torch.tensor([1e33]), rtol=1e-5)


def test_error_feedback_residual_is_a_snapshot_and_payload_is_never_overwritten():
    """The residual is updated in place; residual() returns a copy, and a payload that shares
    memory with the input (the identity codec) is not changed by the next step."""
    ef = ErrorFeedback("none")
    g = _grad(seed=1)
    payload, ctx = ef.compress(g, key="w")
    first, snap = payload[0].clone(), ef.residual("w")
    ef.compress(_grad(seed=2), key="w")
    assert torch.equal(payload[0], first) and torch.equal(snap, torch.zeros_like(g))


@pytest.mark.parametrize("name", NAMES)
def test_decompress_into_equals_decompress(name):
    """``decompress_into`` (the DDP hook decodes straight into DDP's bucket) gives exactly what
    ``decompress`` gives, for every codec, and returns the buffer it was handed."""
    g = _grad(1200, seed=3).view(30, 40)
    c = make(name)
    payload, ctx = c.compress(g, key="w")
    out = torch.full_like(g, float("nan"))
    assert c.decompress_into(payload, ctx, out) is out
    assert torch.equal(out, c.decompress(payload, ctx))
