"""Codecs: communication-free, single-round compressors (see ``lab.compress.base``).

Every module in this package is imported here so its ``@register`` lines run; adding a codec
is adding a file. Each registered codec's docstring then gets its "Arguments" section, written
from its declaration (``lab.argspec.document``): defaults, ranges and meanings, the same
ones ``make`` checks.
"""
import importlib
import pkgutil

from ..argspec import document as _document
from .base import (REGISTRY, Compressor, Payload, check_finite, make, names, register,
                   table as wire_table, wire_bytes)
from .error_feedback import ErrorFeedback
from .wire import Part, PayloadError, WireFormat

for _m in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_m.name}")
for _name in REGISTRY.names():
    _document(REGISTRY.get(_name))

__all__ = ["REGISTRY", "Compressor", "ErrorFeedback", "Part", "Payload", "PayloadError",
           "WireFormat", "check_finite", "make", "names", "register", "wire_bytes", "wire_table"]
