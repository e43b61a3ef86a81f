"""Declared wire formats (issue 29): every codec's payload is checked on decode.

A property test over every registered codec: random tensors and parameters round-trip, and
every mutation of a valid payload (a part cut short, extended, dropped or added, another
dtype, an index out of range either way, a corrupt header field) either raises
:class:`~lab.compress.PayloadError` naming the codec, or, where the mutation is itself a valid
payload, decodes to a finite tensor of the right shape: no silent wrap-around, no error from
deep inside torch. Example counts are bounded (``derandomize``: the same examples on every
run), so the file runs in seconds.
"""
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from lab import compress
from lab.compress import PayloadError, make

NAMES = compress.names()

DENSITY = st.sampled_from([0.01, 0.1, 0.5, 1.0])
PARAMS = {  # strategies for each codec's parameters (defaults elsewhere)
    "topk": st.fixed_dictionaries({"density": DENSITY}),
    "topk_sampled": st.fixed_dictionaries({"density": DENSITY}),
    "randomk": st.fixed_dictionaries({"density": DENSITY, "scale": st.booleans()}),
    "randomk_private": st.fixed_dictionaries({"density": DENSITY, "scale": st.booleans()}),
    "randomk_shared": st.fixed_dictionaries({"density": DENSITY}),
    "wangni": st.fixed_dictionaries({"density": DENSITY,
                                     "method": st.sampled_from(["exact", "greedy"])}),
    "dgc": st.fixed_dictionaries({"density": st.sampled_from([0.001, 0.1, 0.5])}),
    "qsgd": st.fixed_dictionaries({"s": st.sampled_from([1, 2, 3, 10, 15, 255, 300]),
                                   "bucket_size": st.sampled_from([None, 8, 64, 512])}),
    "qsgd_elias": st.fixed_dictionaries({"s": st.sampled_from([1, 2, 3]),
                                         "bucket_size": st.sampled_from([None, 8, 512])}),
    "onebit": st.fixed_dictionaries({"bucket_size": st.sampled_from([None, 8, 100]),
                                     "per_column": st.booleans()}),
    "terngrad": st.fixed_dictionaries({"clip": st.sampled_from([None, 2.5])}),
    "zipml": st.fixed_dictionaries({"levels": st.sampled_from([2, 3, 16]),
                                    "candidates": st.sampled_from([8, 128])}),
    "atomo": st.fixed_dictionaries({"atoms": st.sampled_from(["svd", "coordinate"]),
                                    "budget": st.sampled_from([1, 2, 5])}),
    "countsketch": st.fixed_dictionaries({"rows": st.sampled_from([1, 3]),
                                          "width": st.sampled_from([16, 256])}),
    "threshold": st.fixed_dictionaries({"tau": st.sampled_from([0.01, 0.5, 3.0])}),
    "strom": st.fixed_dictionaries({"tau": st.sampled_from([0.01, 0.5, 3.0])}),
    "drop": st.fixed_dictionaries({"drop_ratio": st.sampled_from([0.5, 0.99])}),
    "adacomp": st.fixed_dictionaries({"bin_size": st.sampled_from([1, 10, 500]),
                                      "scale": st.sampled_from(["layer", "bin"])}),
    "sketchml": st.fixed_dictionaries({"buckets": st.sampled_from([4, 256]),
                                       "groups": st.sampled_from([1, 8]),
                                       "density": st.sampled_from([None, 0.1])}),
}
SHAPES = st.one_of(st.tuples(st.integers(1, 700)),
                   st.tuples(st.integers(1, 30), st.integers(1, 30)))
KINDS = st.sampled_from(["normal", "sparse", "constant", "tiny", "large"])

# another dtype of the same kind of data, as a wrong peer would send it
OTHER_DTYPE = {torch.float32: torch.float64, torch.float16: torch.float32,
               torch.bfloat16: torch.float16, torch.float64: torch.float32,
               torch.int32: torch.int64, torch.int64: torch.int32, torch.uint8: torch.int32}


def _tensor(shape, kind, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g)
    if kind == "sparse":
        x = x * (torch.rand(shape, generator=g) < 0.1)
    elif kind == "constant":
        x = torch.full(shape, 0.25)
    elif kind == "tiny":
        x = x * 1e-30
    elif kind == "large":
        x = x * 1e3
    return x


def _mutations(codec, payload):
    """(description, mutated payload) pairs: the generic ones for every part, and out-of-range
    entries and corrupt header fields where the declaration bounds a part's entries."""
    parts = list(payload)
    out = [("drop the last part", tuple(parts[:-1])),
           ("add a part", tuple(parts + [torch.zeros(3)])),
           ("a list, not a tuple", parts), ("not a payload", parts[0])]
    declared = codec.wire.parts
    for i, t in enumerate(parts):
        flat = t.reshape(-1)

        def put(new, i=i):
            return tuple(parts[:i] + [new] + parts[i + 1:])
        out.append((f"drop part {i}", tuple(parts[:i] + parts[i + 1:])))
        if flat.numel():
            out.append((f"cut part {i} by one", put(flat[:-1])))
            out.append((f"cut part {i} to half", put(flat[: flat.numel() // 2])))
        out.append((f"extend part {i} by one", put(torch.cat([flat, flat.new_zeros(1)]))))
        out.append((f"double part {i}", put(torch.cat([flat, flat]))))
        out.append((f"part {i} as {OTHER_DTYPE[t.dtype]}", put(flat.to(OTHER_DTYPE[t.dtype]))))
        out.append((f"part {i} not a tensor", put(flat.tolist())))
        values = declared[i].values if i < len(declared) else None
        if not flat.numel() or values is None:
            continue
        if values.startswith("finite"):
            bad = [math.nan, math.inf, -math.inf] + ([-1.0] if ">=" in values else [])
        else:
            info = torch.iinfo(t.dtype)
            bad = [v for v in (-1, -5, 10 ** 6, info.max, info.min) if info.min <= v <= info.max]
        for j in sorted({0, flat.numel() - 1}):
            for v in bad:
                new = flat.clone()
                new[j] = v
                out.append((f"part {i}[{j}] = {v}", put(new)))
    return out


def _decode_or_payload_error(codec, payload, ctx, shape, what):
    try:
        out = codec.decompress(payload, ctx)
    except PayloadError as err:
        # an error-feedback wrapper's payload is its inner codec's, named as such
        named = getattr(codec, "inner", codec).name
        assert err.codec == named and str(err).startswith(f"{named}: "), what
        assert isinstance(err, ValueError)
        return None
    assert out.shape == shape, what
    assert torch.isfinite(out).all(), f"{codec.name}: {what} decoded to a non-finite tensor"
    return out


@pytest.mark.parametrize("name", NAMES)
def test_every_codec_declares_its_wire_format(name):
    c = make(name)
    assert isinstance(c.wire, compress.WireFormat) and c.wire.parts
    rows = compress.wire_table([c])
    assert [r["part"] for r in rows] == [p.name for p in c.wire.parts]


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), shape=SHAPES, kind=KINDS, seed=st.integers(0, 2 ** 16))
def test_round_trip_and_every_mutation_is_named_or_harmless(name, data, shape, kind, seed):
    kw = data.draw(PARAMS.get(name, st.just({})), label="params")
    codec = make(name, **kw)
    x = _tensor(shape, kind, seed)
    payload, ctx = codec.compress(x, key="w")
    out = codec.decompress(payload, ctx)  # a valid payload passes its own check
    assert out.shape == x.shape and out.dtype == x.dtype and torch.isfinite(out).all()
    for what, bad in _mutations(codec, payload):
        _decode_or_payload_error(codec, bad, ctx, x.shape, what)


@pytest.mark.parametrize("name, kw, part", [
    ("topk", {"density": 0.1}, "indices"), ("randomk_private", {"density": 0.1}, "indices"),
    ("threshold", {"tau": 0.5}, "indices"), ("adacomp", {}, "indices"),
    ("atomo", {"atoms": "coordinate", "budget": 20}, "indices"), ("wangni", {}, "indices")])
def test_out_of_range_indices_never_wrap_around(name, kw, part):
    """The issue's cases: an index of 10**6 or -5 into a 1000-long tensor is named."""
    c = make(name, **kw)
    payload, ctx = c.compress(torch.randn(1000, generator=torch.Generator().manual_seed(1)))
    i = [p.name for p in c.wire.parts].index(part)
    for v in (10 ** 6, -5, 1000, -1):
        bad = list(payload)
        bad[i] = bad[i].clone()
        bad[i][0] = v
        with pytest.raises(PayloadError, match=rf"{c.name}: payload part '{part}'.*got entries"):
            c.decompress(tuple(bad), ctx)


def test_payload_error_names_codec_part_expected_and_got():
    c = make("qsgd")
    payload, ctx = c.compress(torch.randn(1000))
    with pytest.raises(PayloadError) as err:
        c.decompress((payload[0].double(), *payload[1:]), ctx)
    e = err.value
    assert (e.codec, e.part) == ("qsgd", "norms")
    assert "torch.float32" in str(e.expected) and "torch.float64" in str(e.got)
    with pytest.raises(PayloadError, match=r"qsgd: payload part 'levels': expected ceil\(n \* bits"
                                           r" / 8\) = 500 elements, got 499"):
        c.decompress((payload[0], payload[1], payload[2][:-1]), ctx)
    with pytest.raises(PayloadError, match="3 parts"):
        c.decompress(payload[:2], ctx)


def test_decompress_into_and_error_feedback_check_too():
    """The in-place decoders (the casts' copy, the DDP hook's path) and the EF wrappers check
    their payloads as ``decompress`` does."""
    for name in ("fp16", "none", "bf16"):
        c = make(name)
        payload, ctx = c.compress(torch.randn(100))
        with pytest.raises(PayloadError):
            c.decompress_into((payload[0][:50],), ctx, torch.empty(100))
        with pytest.raises(PayloadError, match="dtype"):
            c.decompress_into((payload[0].double(),), ctx, torch.empty(100))
    ef = make("efsgd")
    payload, ctx = ef.compress(torch.randn(100), key="w")
    assert ef.wire is ef.inner.wire
    with pytest.raises(PayloadError, match="scaled_sign: payload part 'scale'"):
        ef.decompress((payload[0], torch.tensor([math.nan])), ctx)


def test_truncated_streams_the_issue_found_are_now_named():
    """Truncated AdaComp, ATOMO, count sketch and QSGD-Elias payloads decoded silently."""
    x = torch.randn(40, 25, generator=torch.Generator().manual_seed(2))
    for name, kw in (("adacomp", {"scale": "bin"}), ("atomo", {}), ("countsketch", {}),
                     ("qsgd_elias", {})):
        c = make(name, **kw)
        payload, ctx = c.compress(x, key="w")
        for i, t in enumerate(payload):
            if not t.numel():
                continue
            cut = list(payload)
            cut[i] = t.reshape(-1)[:-1]
            try:
                out = c.decompress(tuple(cut), ctx)
            except PayloadError:
                continue
            # the few cuts that leave a valid payload (an AdaComp index list that still
            # needs the same number of sign bytes) decode to a finite tensor
            assert name == "adacomp" and i == 0 and torch.isfinite(out).all()


def test_wire_table_generates_rows_for_every_codec():
    rows = compress.wire_table(NAMES)
    assert {r["codec"] for r in rows if r["codec"]} == set(NAMES) - {"ef"} | {"ef(fp16)"}
    topk = [r for r in rows if r["codec"] == "topk"][0]
    assert topk["length"] == "k" and "density" in topk["where"]


def test_a_changed_parameter_changes_the_checked_format():
    """The names a check derives are kept per tensor size; setting a codec's parameter (as an
    adaptive density controller does) drops them, so the next payload is checked anew."""
    c = make("topk", density=0.1)
    x = torch.randn(1000, generator=torch.Generator().manual_seed(5))
    old = c.compress(x)
    c.decompress(*old)
    c.density = 0.2
    new = c.compress(x)
    assert new[0][0].numel() == 200
    c.decompress(*new)  # k = 200 now
    with pytest.raises(PayloadError, match="k = 200 elements, got 100"):
        c.decompress(*old)
