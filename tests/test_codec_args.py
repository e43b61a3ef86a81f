"""Codec arguments documented from their one declaration (issue 49, items 2, 3 and 6).

Every registered codec's docstring carries an "Arguments" section generated from its
declaration (``lab.argspec.describe``): each argument's default, range and meaning. These tests
fail when an argument lacks a description, when a codec is missing from the API page, when a
docstring's section is stale, and when a public function or method of ``lab.compress`` has no
docstring. QSGD takes ``bits`` as the alternative to ``s``.
"""
import inspect
import re
from pathlib import Path

import pytest
import torch

from lab import argspec, compress
from lab.argspec import Arg, ArgumentError, describe, takes

ROOT = Path(__file__).resolve().parents[1]
NAMES = compress.names()


def _params(factory):
    fn = factory.__init__ if isinstance(factory, type) else factory
    params = list(inspect.signature(fn).parameters.values())
    return [p for p in params[isinstance(factory, type):]
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


@pytest.mark.parametrize("name", NAMES)
def test_every_codec_argument_is_declared_with_a_description(name):
    factory = compress.REGISTRY.get(name)
    args = argspec.declared(factory)
    for p in _params(factory):
        assert p.name in args, f"{name}: argument {p.name!r} is not declared (@takes)"
        assert args[p.name].help.strip(), f"{name}: argument {p.name!r} has no description"


@pytest.mark.parametrize("name", NAMES)
def test_every_codec_docstring_shows_its_generated_arguments(name):
    factory = compress.REGISTRY.get(name)
    assert describe(factory) in factory.__doc__, f"{name}: stale or missing Arguments section"
    assert factory.__doc__.count(argspec.ARGUMENTS_HEADING) == 1


def test_qsgd_shows_s_and_bucket_size_with_default_and_range():
    doc = compress.REGISTRY.get("qsgd").__doc__
    assert "- ``bucket_size`` (default ``512``): values per bucket" in doc
    assert "accepts an int in [1, 2**24] or None" in doc
    assert re.search(r"- ``s`` \(default ``None``\): levels per sign \(None: 15.*accepts an int "
                     r"in \[1, 2\*\*32\) or None", doc)
    assert "- ``bits`` (default ``None``)" in doc and "s = 2**bits - 1" in doc


def test_an_undescribed_argument_shows_and_is_caught():
    @takes(a=Arg(int, ge=1, help="the first"), b=Arg(float))
    def factory(a=1, b=0.5, c=None):
        """A factory."""

    text = describe(factory)
    assert "- ``a`` (default ``1``): the first; accepts an int >= 1" in text
    assert "- ``b`` (default ``0.5``): no description; accepts a finite number" in text
    assert "- ``c`` (default ``None``): not declared" in text
    documented = argspec.document(factory)
    assert argspec.document(documented).__doc__.count(argspec.ARGUMENTS_HEADING) == 1


def test_the_generated_sections_are_valid_restructured_text():
    docutils = pytest.importorskip("docutils.core")
    for name in NAMES:
        text = describe(compress.REGISTRY.get(name))
        out = docutils.publish_doctree(text, settings_overrides={
            "report_level": 2, "halt_level": 5, "warning_stream": False})
        problems = [n for n in out.findall() if n.tagname == "system_message"]
        assert not problems, (name, [p.astext() for p in problems])


def test_the_api_page_lists_every_codec():
    page = (ROOT / "book" / "api" / "compress.md").read_text()
    listed = set(re.findall(r"\.\. auto(?:class|function):: (\S+)", page))
    exported = {getattr(compress, n) for n in compress.__all__}
    for name in NAMES:
        f = compress.REGISTRY.get(name)
        if f in exported:  # documented by the automodule of lab.compress
            continue
        assert f"{f.__module__}.{f.__qualname__}" in listed, f"{name} is not on {page}"


# -- QSGD: bits or s -----------------------------------------------------------------------------
@pytest.mark.parametrize("name, default", [("qsgd", 15), ("qsgd_elias", 2)])
def test_bits_is_the_documented_alternative_to_s(name, default):
    assert compress.make(name).s == default
    for bits in (1, 2, 4, 8, 9, 32):
        c = compress.make(name, bits=bits)
        assert (c.s, c.bits) == (2 ** bits - 1, bits)
    assert compress.make(name, s=7).bits == 3
    assert compress.make(name, bits=4).s == compress.make(name, s=15).s


def test_bits_4_encodes_as_s_15():
    x = torch.randn(1000, generator=torch.Generator().manual_seed(3))
    a, b = compress.make("qsgd", bits=4), compress.make("qsgd", s=15)
    pa, ctx = a.compress(x)
    pb, _ = b.compress(x)
    assert all(torch.equal(u, v) for u, v in zip(pa, pb))
    assert torch.equal(a.decompress(pa, ctx), b.decompress(pb, ctx))


@pytest.mark.parametrize("name", ["qsgd", "qsgd_elias"])
def test_s_and_bits_together_or_out_of_range_are_refused_by_name(name):
    with pytest.raises(ValueError, match=rf"{name}: give s or bits, not both \(bits=4 means "
                                         r"s=15\), got s=7, bits=4"):
        compress.make(name, s=7, bits=4)
    with pytest.raises(ValueError, match="give s or bits"):
        compress.REGISTRY.get(name)(s=3, bits=2)  # the class itself, not only make
    for bad in (0, 33):
        with pytest.raises(ArgumentError, match=rf"{name}: bits must be an int in \[1, 32\]"):
            compress.make(name, bits=bad)
    with pytest.raises(TypeError, match="bits"):
        compress.make(name, bits=4.0)
