"""The small-tensor paths of the codecs (issue 31 item 4) give what the general paths give.

Functional properties only (no timings): the fp16 kernel's overflow boundary, read from the
input (|x| >= 65520 rounds to Inf), the float32 header tensors built from bytes, and Top-k's
finiteness check on the k values it selects instead of the whole input."""
import math

import pytest
import torch

from lab.compress import make, native
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
