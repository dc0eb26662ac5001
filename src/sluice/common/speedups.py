"""The compiled codecs, ``sluice._speedups``, when they are there and wanted.

``speedups`` is the module, or None: not built (no C compiler at install time), or turned off with the
environment variable ``SLUICE_NO_EXTENSIONS=1`` (also ``true``, ``yes``, ``on``; read once, at import). Each
codec keeps its pure-Python twin as the reference and the fallback; the two give the same results
(``tests/unit/test_speedups.py``).
"""

from __future__ import annotations

import os
from types import ModuleType

from sluice.common.errors import MessageFormatError

NO_EXTENSIONS_ENV = "SLUICE_NO_EXTENSIONS"


def _load() -> ModuleType | None:
    if os.environ.get(NO_EXTENSIONS_ENV, "").strip().lower() in ("1", "true", "yes", "on"):
        return None
    try:
        import sluice._speedups as _speedups
    except ImportError:
        return None
    _speedups.configure(MessageFormatError)
    return _speedups


speedups: ModuleType | None = _load()

__all__ = ["NO_EXTENSIONS_ENV", "speedups"]
