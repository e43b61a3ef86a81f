"""Every public class, function, method and property of the core packages has a docstring.

``tests/test_api_docs.py`` checks the names a package exports; this test goes one level down,
to the methods and properties of the classes the reference shows. Autodoc leaves out a member
without a docstring (the pages use ``:members:``, not ``:undoc-members:``), so a method with
none is missing from the API reference, as ``CommLedger.total_bytes`` once was.

What is walked, for each package: its ``__all__``, the modules it exports, and the submodules
its page in ``book/api/`` documents with ``automodule``. Only what is defined in the package
counts (a re-export from elsewhere is checked where it is defined). A method may take its
docstring from a lab base class, as autodoc does, but not from torch or the standard library.
"""
import dataclasses
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["lab.comm", "lab.compress", "lab.hooks", "lab.train", "lab.runtime"]


def _modules(package: str):
    """The package, the modules it exports, and the submodules its reference page documents."""
    pkg = importlib.import_module(package)
    mods = [pkg] + [getattr(pkg, n) for n in pkg.__all__ if inspect.ismodule(getattr(pkg, n))]
    page = ROOT / "book" / "api" / f"{package.rpartition('.')[2]}.md"
    for name in re.findall(r"automodule:: (\S+)", page.read_text()):
        if name.startswith(package + "."):
            mods.append(importlib.import_module(name))
    if package == "lab.compress":   # every codec module: the page lists the codecs by name
        mods += [importlib.import_module(f"{package}.{i.name}") for i in pkgutil.iter_modules(pkg.__path__)]
    return list({m.__name__: m for m in mods}.values())


def _public_names(module):
    """What autodoc's ``:members:`` documents: ``__all__``, else the names defined there."""
    if hasattr(module, "__all__"):
        return list(module.__all__)
    return [n for n, obj in vars(module).items() if not n.startswith("_")
            and getattr(obj, "__module__", None) == module.__name__]


def _doc(obj) -> str:
    if isinstance(obj, (classmethod, staticmethod)):
        obj = obj.__func__
    if isinstance(obj, property):
        obj = obj.fget
    return (getattr(obj, "__doc__", None) or "").strip()


def _class_doc(cls) -> str:
    doc = cls.__dict__.get("__doc__") or ""
    if dataclasses.is_dataclass(cls):  # the signature @dataclass writes when there is none
        if doc == cls.__name__ + str(inspect.signature(cls)).replace(" -> None", ""):
            return ""
    return doc.strip()


def _is_method(value) -> bool:
    return isinstance(value, (classmethod, staticmethod, property)) or inspect.isfunction(value)


def _method_doc(cls, name: str) -> str:
    """The docstring of ``cls.name``: its own, or that of a lab base class it overrides."""
    for klass in cls.__mro__:
        if name in vars(klass) and klass.__module__.split(".")[0] == "lab":
            doc = _doc(vars(klass)[name])
            if doc:
                return doc
    return ""


def _undocumented(package: str) -> list[str]:
    missing, seen = [], set()
    for module in _modules(package):
        for name in _public_names(module):
            obj = getattr(module, name)
            if not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue  # values and modules: tests/test_api_docs.py
            if not getattr(obj, "__module__", "").startswith(package) or obj in seen:
                continue
            seen.add(obj)
            where = f"{obj.__module__}.{obj.__qualname__}"
            if inspect.isfunction(obj):
                if not _doc(obj):
                    missing.append(where)
                continue
            if not _class_doc(obj):
                missing.append(where)
            for attr, value in vars(obj).items():
                if attr in ("ARGS", "RULE"):   # a codec's declaration, documented by its class
                    continue
                if not attr.startswith("_") and _is_method(value) and not _method_doc(obj, attr):
                    missing.append(f"{where}.{attr}")
    return missing


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_member_has_a_docstring(package):
    missing = _undocumented(package)
    assert not missing, f"{package}: public names without a docstring:\n  " + "\n  ".join(missing)


def test_the_walk_reaches_methods_and_submodules():
    import torch
    from lab.comm import CommLedger

    assert {m.__name__ for m in _modules("lab.comm")} >= {"lab.comm", "lab.comm.cost", "lab.comm.kernel"}

    class Bare(CommLedger):
        def total_bytes(self, op=None, tag=None):  # takes CommLedger's docstring, as autodoc does
            return 0

        def fresh(self):
            return 0

    class Layer(torch.nn.Module):
        def forward(self, x):  # torch's docstring does not count
            return x

    Bare.__module__ = Layer.__module__ = "lab.fake"
    assert _method_doc(Bare, "total_bytes") and not _method_doc(Bare, "fresh")
    assert not _method_doc(Layer, "forward") and _doc(torch.nn.Module.forward)
