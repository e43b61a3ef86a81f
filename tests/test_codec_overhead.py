"""The small-tensor paths of the codecs (issue 31 item 4) give what the general paths give.

Functional properties only (no timings): the fp16 kernel's overflow boundary, read from the
input (|x| >= 65520 rounds to Inf), the float32 header tensors built from bytes, Top-k's
finiteness check on the k values it selects instead of the whole input; and the fused kernels
of lab.compress.native_small against the general routes (``native_small.general()``): the same
payloads, decoded values, kept state and generator state, call after call, the same refusals,
Top-k's order and Random-k's draws as torch's, TernGrad's sigma as torch's."""
import math

import pytest
import torch

from lab.compress import make, native, native_small
from lab.compress.base import float32s

BELOW = 65520.0 - 2.0 ** -8  # the largest float32 below 65520 (its spacing there: 2^-8)


@pytest.mark.parametrize("at", [0, 15, 16, 999])  # in the 16-wide body and in the tail
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_fp16_overflow_boundary_is_exact_on_both_paths(at, sign):
    x = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    x[at] = sign * BELOW  # rounds to +-65504: accepted
    assert float(torch.tensor(BELOW, dtype=torch.float32)) == BELOW
    for reference in (False, True):
        with native.reference() if reference else _nothing():
            payload, ctx = make("fp16").compress(x)
            assert payload[0][at].item() == sign * 65504.0
    x[at] = sign * 65520.0  # rounds to Inf: refused
    for reference in (False, True):
        with native.reference() if reference else _nothing():
            with pytest.raises(OverflowError, match="fp16"):
                make("fp16").compress(x)


def test_float32s_equals_torch_tensor():
    values = (0.0, -0.0, 1.5, 3.4028234663852886e38, math.inf, 1e-45)
    got, want = float32s(*values), torch.tensor(values, dtype=torch.float32)
    assert got.dtype == torch.float32 and got.shape == want.shape
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))
    got[0] = 7.0  # a writable tensor of its own, as torch.tensor gives
    assert got[0].item() == 7.0


@pytest.mark.parametrize("n", [2, 100, 1000, 70000])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_topk_refuses_non_finite_wherever_it_is(n, bad):
    for at in (0, n // 3, n - 1):
        x = torch.randn(n, generator=torch.Generator().manual_seed(n))
        x[at] = bad
        with pytest.raises(FloatingPointError, match="topk"):
            make("topk", density=0.01).compress(x)


@pytest.mark.parametrize("n", [1, 10, 1000, 2 ** 17 + 5])
def test_topk_payload_equals_the_general_route(n):
    from lab.compress.topk import sparse_payload, topk_indices
    x = torch.randn(n, generator=torch.Generator().manual_seed(1))
    c = make("topk", density=0.01)
    payload, _ = c.compress(x)
    k = payload[0].numel()
    vals, idx = sparse_payload(x, topk_indices(x, k, torch.Generator().manual_seed(0)))
    assert torch.equal(payload[1], idx) and torch.equal(payload[0], vals)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# -- the small-tensor paths (lab.compress.native_small) against the general routes -----------

needs_kernels = pytest.mark.skipif(native.library() is None, reason="no C compiler here")

# every codec with a small-tensor path, default and other parameters (bucket and level
# counts, a k, no clipping, DGC's switches), and the wrappers around them
SMALL = [("sign", {}), ("scaled_sign", {}), ("efsgd", {}), ("onebit", {}), ("onebit_sgd", {}),
         ("onebit", {"bucket_size": 2048}), ("qsgd", {}), ("qsgd", {"s": 1}),
         ("qsgd", {"s": 3, "bucket_size": None}), ("qsgd", {"s": 255, "bucket_size": 100}),
         ("qsgd", {"s": 7, "bucket_size": 1000}), ("terngrad", {}), ("terngrad", {"clip": None}),
         ("terngrad", {"clip": 1e-40}), ("topk", {}), ("topk", {"k": 5}),
         ("topk", {"density": 0.3}), ("randomk", {}), ("randomk", {"density": 0.2}),
         ("randomk_private", {}),
         ("randomk_private", {"k": 3}), ("dgc", {}), ("dgc", {"warmup": False, "density": 0.01}),
         ("dgc", {"sampled": False, "warmup": False}), ("dgc", {"momentum_correction": False}),
         ("threshold", {}), ("threshold", {"tau": 0.5}), ("strom", {"tau": 1.0}),
         ("ef", {"inner": "topk"})]


def _bits(t: torch.Tensor):
    """dtype, shape and bytes of ``t``: equal exactly where the tensors are bit for bit."""
    return t.dtype, tuple(t.shape), t.detach().contiguous().view(torch.uint8).reshape(-1).tolist()


def _inputs(n: int, seed: int):
    """Three successive gradients of n values: random, with zeros and -0.0 among them, and
    one with ties and a large mean (TernGrad's cancellation case)."""
    g = torch.Generator().manual_seed(1000 * seed + n)
    x = torch.randn(n, generator=g)
    y = torch.randn(n, generator=g) * 3
    y[::7] = 0.0
    y[1::11] = -0.0
    z = (torch.randn(n, generator=g) * 4).round() / 4 + 50.0
    return [x, y, z]


def _state(codec):
    """The per-key state a codec keeps (residuals, DGC's u and v), as bits."""
    inner = getattr(codec, "inner", codec)
    out = {}
    for holder in (codec, inner):
        for name in ("residuals", "velocity", "accumulated"):
            for key, t in getattr(holder, name, {}).items():
                out[(name, key)] = _bits(t)
    return out


def _run(codec, xs):
    """Payloads, decoded values and refusals of successive calls, as bits."""
    out = []
    for x in xs:
        try:
            payload, ctx = codec.compress(x, key="w")
        except (FloatingPointError, OverflowError, ValueError) as err:
            out.append((type(err).__name__, str(err)))
            continue
        out.append(([_bits(t) for t in payload], _bits(codec.decompress(payload, ctx))))
    gen = getattr(codec, "inner", codec).generator
    return out, _state(codec), gen.get_state().tolist()


@needs_kernels
@pytest.mark.parametrize("name,kw", SMALL)
@pytest.mark.parametrize("n", [1, 7, 64, 1000, 4099, 2 ** 16 + 5])
def test_small_paths_give_the_general_routes_bits(name, kw, n):
    """Payloads, decoded values, kept state and the generator's state after successive calls:
    the same on the small-tensor paths as on the general routes (their C kernels on)."""
    for seed in (0, 3):
        fast = _run(make(name, seed=seed, **kw), _inputs(n, seed))
        with native_small.general():
            slow = _run(make(name, seed=seed, **kw), _inputs(n, seed))
        assert fast == slow, (name, kw, n, seed)


@needs_kernels
@pytest.mark.parametrize("name,kw", SMALL)
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_small_paths_refuse_what_the_general_routes_refuse(name, kw, bad):
    """NaN and Inf are refused as before, with the same error, and leave the same state (the
    generator undrawn, residuals and DGC's buffers as they were), wherever they are."""
    for n in (1, 9, 1000):
        for at in (0, n // 2, n - 1):
            xs = _inputs(n, 1)
            xs[1] = xs[1].clone()
            xs[1][at] = bad
            fast = _run(make(name, **kw), xs)
            with native_small.general():
                slow = _run(make(name, **kw), xs)
            assert fast == slow, (name, kw, n, at)
            assert isinstance(fast[0][1][0], str)  # refused (FloatingPointError; k > n first)


@needs_kernels
@pytest.mark.parametrize("name", ["sign", "scaled_sign", "efsgd", "onebit", "qsgd", "terngrad",
                                  "topk", "randomk", "threshold", "dgc"])
def test_small_paths_take_shapes_and_leave_other_dtypes_to_the_general_route(name):
    g = torch.Generator().manual_seed(5)
    for x in (torch.randn(30, 40, generator=g), torch.randn(1000, generator=g)[::2],
              torch.randn(600, generator=g).half(), torch.randn(600, generator=g).double(),
              torch.randn(500, generator=g).requires_grad_()):
        fast = _run(make(name), [x, x * 2])
        with native_small.general():
            slow = _run(make(name), [x, x * 2])
        assert fast == slow, (name, x.shape, x.dtype)


@needs_kernels
def test_topk_kernel_is_torch_topk_or_declines_ties():
    g = torch.Generator().manual_seed(2)
    for n, k in [(64, 1), (100, 1), (1000, 15), (5000, 70), (70000, 1000)]:
        for trial in range(5):
            x = torch.randn(n, generator=g)
            if trial == 4:
                x = x.round()  # many ties: torch's heap decides, so the kernel declines
            got = native_small.topk(x, k)
            top = torch.topk(x.abs(), k, sorted=False).indices
            if got is None:
                ranked = x.abs().sort(descending=True).values[:k + 1]
                assert (ranked[1:] == ranked[:-1]).any()
            else:
                assert torch.equal(got[1].long(), top) and torch.equal(got[0], x[top])
    assert native_small.topk(torch.tensor([1.0] * 63 + [math.nan]), 1) is None


@needs_kernels
@pytest.mark.parametrize("n,k", [(1, 1), (7, 7), (64, 7), (100, 13), (1000, 10), (1000, 125),
                                 (5000, 600), (70000, 700), (2 ** 20 + 3, 10486)])
def test_random_indices_draw_what_torch_draws_and_leave_its_state(n, k):
    from lab.compress.randomk import distinct_indices
    fast, slow = torch.Generator().manual_seed(n + k), torch.Generator().manual_seed(n + k)
    x = torch.randn(n, generator=torch.Generator().manual_seed(1))
    for _ in range(4):  # across the generator's refills of 624 words
        idx, vals, idx32 = native_small.random_indices(fast, n, k, x, True)
        want = distinct_indices(n, k, slow)
        assert torch.equal(idx, want) and torch.equal(vals, x[want])
        assert torch.equal(idx32, want.to(torch.int32))
    assert torch.equal(fast.get_state(), slow.get_state())
    assert torch.equal(torch.rand(5, generator=fast), torch.rand(5, generator=slow))


@needs_kernels
def test_key_draws_what_randint_draws():
    a, b = torch.Generator().manual_seed(4), torch.Generator().manual_seed(4)
    for _ in range(700):  # past a refill
        ptr = native_small.key(a)
        want = torch.randint(0, 2 ** 32, (2,), generator=b, dtype=torch.int64)
        assert ptr == native_small._local.key.data_ptr()
        assert torch.equal(native_small._local.key, want)
    assert torch.equal(a.get_state(), b.get_state())


def test_std_from_sums_is_std():
    from lab.compress.terngrad import std, std_from_sums
    g = torch.Generator().manual_seed(8)
    for trial in range(300):
        n = int(torch.randint(2, 20000 if trial % 10 == 0 else 3000, (1,), generator=g))
        x = torch.randn(n, generator=g) * float(torch.exp(torch.randn((), generator=g) * 4))
        x += float(torch.randn((), generator=g)) * (0.3 if trial % 3 else 30.0) * x.std()
        assert std_from_sums(x, (x * x).reshape(1, -1)) == float(std(x)), (trial, n)
        assert std_from_sums(x, torch.stack([x, x * x])) == float(std(x)), (trial, n)


@needs_kernels
def test_inline_decoder_checks_refuse_what_the_format_refuses():
    """A payload the declared format refuses is refused with the same PayloadError by the
    small-tensor decoders (which check inline) as by the full check."""
    from lab.compress.wire import PayloadError
    x = torch.randn(1000, generator=torch.Generator().manual_seed(3))
    for name in ["sign", "scaled_sign", "onebit", "qsgd", "terngrad", "threshold"]:
        codec = make(name)
        payload, ctx = codec.compress(x)
        for i, part in enumerate(payload):
            bad = [list(payload), list(payload), list(payload), list(payload)]
            bad[0][i] = part[:-1]  # one short
            bad[1][i] = part.to(torch.int16)  # another dtype
            bad[2][i] = part.float() * math.nan if part.is_floating_point() else part[:0]
            bad[3] = list(payload) + [part]  # a part too many
            for b in bad:
                with native_small.general():
                    try:
                        codec.check_payload(tuple(b), ctx)
                        want = None
                    except PayloadError as err:
                        want = str(err)
                if want is None:
                    continue
                with pytest.raises(PayloadError) as got:
                    codec.decompress(tuple(b), ctx)
                assert str(got.value) == want, (name, i)


def test_sqrt64_to_32_is_torch_root_rounded():
    """The float64 root rounded to float32, without torch where its neighbours agree, and with
    torch where the root lies within one unit of a float32 rounding boundary."""
    g = torch.Generator().manual_seed(9)
    values = torch.rand(20000, dtype=torch.float64, generator=g) \
        * torch.exp(torch.randn(20000, dtype=torch.float64, generator=g) * 20)
    a = torch.rand(2000, generator=g) + 0.5  # float32 values
    b = torch.nextafter(a, torch.tensor(2.0))
    mid = (a.double() + b.double()) / 2  # exactly between two float32: the hard case
    values = torch.cat([values, mid * mid, torch.tensor([0.0, 1.0, 2.0, 1e-300, 1e300],
                                                         dtype=torch.float64)])
    want = values.sqrt().float().tolist()
    got = [native_small.sqrt64_to_32(v) for v in values.tolist()]
    assert got == want


@needs_kernels
@pytest.mark.parametrize("name", ["threshold", "topk", "dgc", "randomk_private", "randomk"])
def test_small_decoders_name_an_index_out_of_range_as_before(name):
    from lab.compress.wire import PayloadError
    x = torch.randn(1000, generator=torch.Generator().manual_seed(4))
    errors = []
    for general in (False, True):
        codec = make(name, **({"tau": 1.0} if name == "threshold" else {}))
        payload, ctx = codec.compress(x)
        if name == "randomk":  # the indices live in the ctx
            idx = ctx[2].clone()
            idx[-1] = 1000
            ctx = (ctx[0], ctx[1], idx)
        else:
            at = 0 if name == "threshold" else 1
            idx = payload[at].clone()
            idx[-1] = 1000
            payload = tuple(idx if i == at else t for i, t in enumerate(payload))
        with native_small.general() if general else _nothing():
            with pytest.raises(PayloadError) as err:
                codec.decompress(payload, ctx)
        errors.append(str(err.value))
    assert errors[0] == errors[1] and "0..999" in errors[0]

