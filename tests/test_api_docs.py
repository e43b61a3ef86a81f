"""The API reference (book/api/) is generated from docstrings: every public name needs one.

The public API is what ``lab`` and each of its packages export in ``__all__``. A class must
have a docstring of its own (not one inherited, not the signature a dataclass writes for
itself); a function, a method or a module a non-empty ``__doc__``. A value (a constant, a
registry, an alias such as ``Payload = tuple``) cannot carry a docstring, so it needs a ``#:``
doc comment where it is assigned, which is what autodoc shows; its reference page must name it.
"""
import dataclasses
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest
import yaml

import lab

ModuleAnalyzer = pytest.importorskip("sphinx.pycode").ModuleAnalyzer

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["lab", "lab.adaptive", "lab.advise", "lab.aggregate", "lab.attack", "lab.averaging", "lab.bench",
            "lab.cli", "lab.comm", "lab.compress", "lab.hooks", "lab.pipeline", "lab.run", "lab.runtime",
            "lab.schedule", "lab.sim", "lab.sync", "lab.train"]


def _page(package: str) -> Path:
    return ROOT / "book" / "api" / f"{package.rpartition('.')[2] or package}.md"


def _public(package: str):
    module = importlib.import_module(package)
    assert hasattr(module, "__all__"), f"{package} has no __all__"
    return [(name, getattr(module, name)) for name in module.__all__]


def _own_doc(obj) -> str:
    """The docstring the reference would show for ``obj``, or "" if it has none of its own."""
    if inspect.ismodule(obj) or inspect.isroutine(obj):
        return (obj.__doc__ or "").strip()
    if inspect.isclass(obj) and obj.__module__.split(".")[0] == "lab":
        doc = obj.__dict__.get("__doc__") or ""
        if dataclasses.is_dataclass(obj):  # the signature @dataclass writes when there is none
            generated = obj.__name__ + str(inspect.signature(obj)).replace(" -> None", "")
            if doc == generated:
                return ""
        return doc.strip()
    return ""  # a value: documented by a doc comment, see _doc_comment


def _doc_comment(package: str, name: str, obj):
    """(module, comment) for the ``#:`` comment where ``obj`` is assigned to ``name``."""
    module = importlib.import_module(package)
    candidates = [package]
    if hasattr(module, "__path__"):
        candidates += [f"{package}.{m.name}" for m in pkgutil.iter_modules(module.__path__)]
    for modname in candidates:
        mod = importlib.import_module(modname)
        if getattr(mod, name, None) is not obj:
            continue
        comment = ModuleAnalyzer.for_module(modname).find_attr_docs().get(("", name))
        if comment and "".join(comment).strip():
            return modname, "".join(comment).strip()
    return None, ""


def test_every_package_of_lab_is_covered_and_has_a_reference_page():
    packages = {f"lab.{m.name}" for m in pkgutil.iter_modules(lab.__path__) if m.ispkg}
    assert packages | {"lab"} == set(PACKAGES)
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    listed = str(toc)
    for package in PACKAGES:
        page = _page(package)
        assert page.is_file(), page
        assert f"book/api/{page.stem}" in listed, f"{page} is not in _toc.yml"
        assert f"automodule:: {package}\n" in page.read_text(), page
        assert "{doc}`" in page.read_text(), f"{page} links no chapter"


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_has_its_own_docstring(package):
    missing = []
    for name, obj in _public(package):
        if inspect.ismodule(obj) or inspect.isroutine(obj) or (
                inspect.isclass(obj) and obj.__module__.split(".")[0] == "lab"):
            if not _own_doc(obj):
                missing.append(name)
            continue
        modname, comment = _doc_comment(package, name, obj)
        if not comment:
            missing.append(f"{name} (a value: add a '#:' comment where it is assigned)")
            continue
        page = _page(package).read_text()
        shown = f"autodata:: {modname}.{name}" in page or (modname == package and name in page)
        assert shown, f"{package}.{name} is documented in {modname} but not on {_page(package)}"
    assert not missing, f"{package}: public names without a docstring of their own: {missing}"


def test_the_checks_can_fail():
    @dataclasses.dataclass
    class Undocumented:
        x: int = 0

    Undocumented.__module__ = "lab.fake"

    class Inherits(lab.Collective):
        pass

    def bare():
        pass

    Inherits.__module__ = "lab.fake"
    assert _own_doc(Undocumented) == "" and _own_doc(Inherits) == "" and _own_doc(bare) == ""
    assert _own_doc(lab.Collective) and _own_doc(lab.launch)
    assert _doc_comment("lab.comm", "PRESETS", {}) == (None, "")
    assert _doc_comment("lab.comm", "PRESETS", lab.comm.PRESETS)[0] == "lab.comm.network"
