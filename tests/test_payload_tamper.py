"""Tampered payloads (issue 49, item 4): refused with a PayloadError whose message names the part.

A table of tamperings, each applied to a valid payload of a 1000-value tensor (and of a 40 x 25
matrix where the codec lays out a matrix), checked on every route that reads a payload:
``decompress``, ``check_payload`` (which must refuse all that ``decompress`` refuses: a
codec whose decoder checks what its format cannot declare sets ``checks_in_decode``) and,
for the count sketch, the sketch class that ``lab.aggregate.sketchsgd`` decodes with. The
message must name the part tampered with. Where a cut leaves a part a valid length on its own
and a later part then disagrees on a count (ATOMO's ``us`` and ``v`` both hold ``kept``
columns), either may be the one cut, so the message names both.
"""
import pytest
import torch

from lab.compress import PayloadError, make
from lab.compress.countsketch import CountSketch


def _half(payload, i):
    """Part ``i`` cut to half its length (flat: an allgathered payload arrives flat)."""
    t = payload[i].reshape(-1)
    return tuple(t[: t.numel() // 2] if j == i else p for j, p in enumerate(payload))


def _sketchml_key_past_n():
    """A SketchML payload whose keys include 10**6, sent to a peer whose tensor has 1000."""
    codec = make("sketchml")
    x = torch.zeros(10 ** 6 + 1)
    x[5], x[10 ** 6] = 1.0, 2.0
    payload, _ = codec.compress(x)
    _, small = codec.compress(torch.randn(1000))
    return codec, payload, (torch.Size([1000]), torch.float32, small[2])


def _elias_position_past_n():
    """A QSGD-Elias stream whose one nonzero sits at 999, sent to a peer whose tensor has 100."""
    codec = make("qsgd_elias", bucket_size=None)
    x = torch.zeros(1000)
    x[999] = 1.0
    payload, _ = codec.compress(x)
    return codec, payload, (torch.Size([100]), torch.float32, None)


def _zipml_code_past_the_points():
    """ZipML with 3 points (2-bit codes): a code of 3 addresses past them."""
    codec = make("zipml", levels=3)
    payload, ctx = codec.compress(torch.randn(1000, generator=torch.Generator().manual_seed(7)))
    codes = payload[1].clone()
    codes[0] = 0xFF
    return codec, (payload[0], codes), ctx


def _case(name, kw, tamper, shape=(1000,)):
    def build():
        codec = make(name, **kw)
        x = torch.randn(shape, generator=torch.Generator().manual_seed(7))
        payload, ctx = codec.compress(x)
        return codec, tamper(payload), ctx
    return build


TAMPERINGS = {  # what -> (a builder of (codec, tampered payload, ctx), parts the message names)
    # a vector's 31 x 33 matrix: us keeps 31 * kept values, so half of it is a valid length
    "atomo: us cut to half": (_case("atomo", {}, lambda p: _half(p, 0)), ("us", "v")),
    "atomo: v cut to half": (_case("atomo", {}, lambda p: _half(p, 1)), ("v",)),
    "atomo 40x25: us cut to half": (_case("atomo", {"budget": 4}, lambda p: _half(p, 0),
                                          (40, 25)), ("us",)),
    "atomo 40x25: v cut to half": (_case("atomo", {"budget": 4}, lambda p: _half(p, 1),
                                         (40, 25)), ("v",)),
    "atomo coordinates: values cut to half": (
        _case("atomo", {"atoms": "coordinate", "budget": 50}, lambda p: _half(p, 0)),
        ("values", "indices")),
    "countsketch: table cut to half": (_case("countsketch", {}, lambda p: _half(p, 0)),
                                       ("table",)),
    "countsketch: table one short": (
        _case("countsketch", {}, lambda p: (p[0].reshape(-1)[:-1],)), ("table",)),
    "sketchml: a key of 10**6 for n = 1000": (_sketchml_key_past_n, ("data",)),
    # the other codecs whose decoder checks what the format cannot declare
    "qsgd_elias: a position past n": (_elias_position_past_n, ("stream",)),
    "zipml: a code past the points": (_zipml_code_past_the_points, ("codes",)),
}


@pytest.mark.parametrize("what", TAMPERINGS)
@pytest.mark.parametrize("route", ["decompress", "check_payload"])
def test_a_tampered_payload_is_refused_naming_its_part(what, route):
    build, parts = TAMPERINGS[what]
    codec, payload, ctx = build()
    with pytest.raises(PayloadError) as err:
        getattr(codec, route)(payload, ctx)
    message = str(err.value)
    assert message.startswith(f"{codec.name}: payload part "), message
    for part in parts:
        assert repr(part) in message, (what, message)
    assert err.value.part in parts


def test_the_untampered_payloads_pass():
    """The table's payloads before tampering decode, so each refusal is the tampering's."""
    x = torch.randn(1000, generator=torch.Generator().manual_seed(7))
    for name, kw in (("atomo", {}), ("atomo", {"atoms": "coordinate", "budget": 50}),
                     ("countsketch", {}), ("sketchml", {}), ("qsgd_elias", {}),
                     ("zipml", {"levels": 3})):
        codec = make(name, **kw)
        payload, ctx = codec.compress(x)
        assert codec.check_payload(payload, ctx) == tuple(payload)
        assert torch.isfinite(codec.decompress(payload, ctx)).all()


@pytest.mark.parametrize("cut", [lambda t: t[:-1], lambda t: t.reshape(-1)[: t.numel() // 2],
                                 lambda t: t.reshape(-1)[:-1]])
def test_the_sketch_class_refuses_a_cut_table(cut):
    """``CountSketch.estimate`` and ``votes`` (SketchSGD's decoder) name a table of the wrong
    size instead of indexing past it (an IndexError) or reading a longer one silently."""
    cs = CountSketch(100, rows=3, width=16, seed=0)
    table = cs.sketch(torch.randn(100))
    for bad in (cut(table), torch.cat([table.reshape(-1), table.new_zeros(5)])):
        with pytest.raises(PayloadError, match="countsketch: payload part 'table'.* = 48"):
            cs.estimate(bad)
        with pytest.raises(PayloadError, match="'table'"):
            cs.votes(bad)
