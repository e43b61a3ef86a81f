"""The codecs' device paths (:mod:`lab.compress.device`), run on the CPU: each fused function
equals the readable reference bit for bit, eager and compiled, and a codec forced onto its
device path (``FUSE_DEVICES`` with the CPU, the C kernels off) gives the payload the CPU path
gives (deterministic codecs) or one the CPU decodes to the same tensor (stochastic ones). The
same code runs compiled on CUDA (tests/test_gpu.py; speed: tools/gpu_check.py)."""
import pytest
import torch

import lab.compress as C
from lab.compress import device as D, fused as F, native
from lab.compress.packing import (pack_bits_reference, pack_uint_reference,
                                  unpack_bits_reference, unpack_uint_reference)
from lab.compress.qsgd import dequantize, stochastic_levels


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


@pytest.fixture
def device_path(monkeypatch):
    """The CPU counts as a device for the device paths; the cores run eager (LAB_FUSE=0)."""
    monkeypatch.setattr(F, "FUSE_DEVICES", {"cpu", "cuda"})
    monkeypatch.setenv("LAB_FUSE", "0")


def _qsgd_inputs(rows=6, bucket=64, s=15):
    v = torch.randn(rows, bucket, generator=gen()) * 3
    v[1] = 0.0  # an all-zero bucket
    norm = v.norm(dim=1, keepdim=True)
    safe = torch.where(norm > 0, norm, torch.ones_like(norm))
    return v, safe, torch.rand(v.shape, generator=gen(1)), s


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
def test_pack_and_expand_equal_the_references(bits):
    codes = torch.randint(0, 2 ** bits, (800,), generator=gen(bits), dtype=torch.uint8)
    packed = D.pack_codes.reference(codes, bits)
    assert torch.equal(packed, pack_uint_reference(codes, bits))
    values = torch.randn(2 ** bits, generator=gen(9))
    got = D.expand_table.reference(packed, values, bits)
    assert torch.equal(got, values[unpack_uint_reference(packed, 800, bits)])


def test_sign_and_cast_cores_equal_the_references():
    x = torch.randn(1024, generator=gen())
    x[::7] = 0.0  # sign(0) = +1
    bits, l1 = D.sign_bits_l1.reference(x)
    assert torch.equal(bits, pack_bits_reference(x >= 0)) and torch.isclose(l1, x.abs().sum())
    assert torch.equal(unpack_bits_reference(bits, 1024), x >= 0)
    for dtype in (torch.float16, torch.bfloat16):
        wire, ok = D.cast_checked.reference(x * 1e3, dtype)
        assert torch.equal(wire, (x * 1e3).to(dtype)) and bool(ok)
    _, ok = D.cast_checked.reference(x * 1e6, torch.float16)  # overflows fp16
    assert not bool(ok)
    y = x.clone()
    y[5] = float("nan")
    assert not bool(D.cast_checked.reference(y, torch.bfloat16)[1])
    assert not torch.isfinite(D.sign_bits_l1.reference(y)[1])


def test_qsgd_cores_equal_the_references():
    v, safe, u, s = _qsgd_inputs()
    signs, levels = D.qsgd_encode.reference(v, safe, u, s, 4)
    want = stochastic_levels.reference(v, safe, u, s, torch.uint8).reshape(-1)
    assert torch.equal(levels, pack_uint_reference(want, 4))
    assert torch.equal(signs, pack_bits_reference(v.reshape(-1) < 0))
    norms = safe.reshape(-1) * (v.abs().sum(dim=1) > 0)
    out = D.qsgd_decode.reference(norms, signs, levels, s, 64, 4)
    ref = dequantize(norms, want, v.reshape(-1) < 0, s, 64, v.numel())
    assert torch.equal(out.view(torch.int32), ref.view(torch.int32))  # -0.0 included


def test_compiled_cores_equal_eager(monkeypatch):
    """torch.compile of each core on the CPU (as CUDA compiles it) gives the same bits."""
    monkeypatch.setattr(F, "FUSE_DEVICES", {"cpu", "cuda"})
    monkeypatch.setattr(F, "FUSE_MIN_NUMEL", 1)
    monkeypatch.delenv("LAB_FUSE", raising=False)
    v, safe, u, s = _qsgd_inputs()
    x = v.reshape(-1)
    signs, levels = D.qsgd_encode.reference(v, safe, u, s, 4)
    for core, args in ((D.qsgd_encode, (v, safe, u, s, 4)),
                       (D.qsgd_decode, (safe.reshape(-1), signs, levels, s, 64, 4)),
                       (D.sign_bits_l1, (x,))):
        f = F.fused(core.reference)
        ref = core.reference(*args)
        f(*args)
        got = f(*args)  # the second sighting compiles
        assert f.state["compiled"] is not None and not f.state["failed"]
        for a, b in zip(got if isinstance(got, tuple) else (got,), ref if isinstance(ref, tuple) else (ref,)):
            assert torch.equal(a, b) if a.dtype != torch.float32 or a.dim() else torch.isclose(a, b)


DETERMINISTIC = ("fp16", "bf16", "sign")


@pytest.mark.parametrize("name", DETERMINISTIC + ("scaled_sign", "efsgd", "qsgd", "terngrad"))
def test_codecs_on_their_device_path_agree_with_the_cpu_path(name, device_path):
    x = torch.randn(4096, generator=gen())
    cpu = C.make(name)
    want_payload, want_ctx = cpu.compress(x)
    want = cpu.decompress(want_payload, want_ctx)
    dev = C.make(name)
    with native.reference():
        payload, ctx = dev.compress(x)
        got = dev.decompress(payload, ctx)
    assert [(t.dtype, t.numel()) for t in payload] == [(t.dtype, t.numel()) for t in want_payload]
    if name in DETERMINISTIC:
        assert all(torch.equal(a, b) for a, b in zip(payload, want_payload)), name
        assert torch.equal(got, want)
    elif name == "scaled_sign":  # the same bits; the scale summed in float32, not float64
        assert torch.equal(payload[0], want_payload[0])
        assert torch.allclose(payload[1], want_payload[1], rtol=1e-6)
    else:  # drawn another way: the CPU decodes the device payload to what the device decodes
        assert torch.allclose(got, cpu.decompress(payload, ctx), rtol=0, atol=0)


def test_qsgd_device_path_is_unbiased(device_path):
    x = torch.randn(2048, generator=gen())
    codec, draws = C.make("qsgd", s=15, bucket_size=512), 300
    with native.reference():
        mean = sum(codec.decompress(*codec.compress(x)) for _ in range(draws)) / draws
    norms = x.view(-1, 512).norm(dim=1).repeat_interleave(512)
    assert ((mean - x).abs() <= 6 * norms / 15 / 2 / draws ** 0.5 + 1e-6).float().mean() > 0.999


def test_device_path_refuses_nan_as_the_cpu_path_does(device_path):
    x = torch.randn(1024, generator=gen())
    x[3] = float("nan")
    for name in ("fp16", "sign", "scaled_sign", "qsgd"):
        with native.reference(), pytest.raises(FloatingPointError, match="NaN"):
            C.make(name).compress(x)


def test_fused_sizes_the_work_by_its_largest_tensor(monkeypatch):
    """QSGD's decoder gets its short norms first: the call is still compiled when the payload
    is large (on the first GPU check it was not, and stayed eager)."""
    monkeypatch.setattr(F, "FUSE_DEVICES", {"cpu", "cuda"})
    monkeypatch.setattr(F, "FUSE_MIN_NUMEL", 4096)
    monkeypatch.delenv("LAB_FUSE", raising=False)
    f = F.fused(D.qsgd_decode.reference)
    norms = torch.rand(16)  # 16 buckets of 512: 8192 values
    signs, levels = torch.zeros(1024, dtype=torch.uint8), torch.zeros(4096, dtype=torch.uint8)
    for _ in range(2):
        f(norms, signs, levels, 15, 512, 4)
    assert f.state["compiled"] is not None
