"""The framework integrations' optional imports: one place that names the extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType

from ds4_context_core._exceptions import MissingExtraError

__all__ = ["optional_module"]


def optional_module(name: str, *, extra: str, package: str) -> ModuleType:
    """``name`` imported on first use, or :class:`MissingExtraError` naming ``extra`` and ``package``.

    ``importlib.import_module``, not an import statement: it honours a module blocked in ``sys.modules``.
    """
    try:
        return importlib.import_module(name)
    except ImportError:
        raise MissingExtraError(extra, "ds4-context-core", package) from None
