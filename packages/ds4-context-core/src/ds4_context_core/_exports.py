"""Public names report the public module users import them from, as httpx's do.

A class or function defined in a private room (``ds4_context_core._history._model``) is given the
``__module__`` of the first public module that exports it, so reprs, tracebacks, pickles and docs name
``ds4_context_core.history``, never an implementation path that may move. Public modules call
:func:`adopt_public_names` last; the most specific one runs first (the package ``__init__`` imports it),
so it wins over the package's top level.

Records are left alone: msgspec Structs, pydantic models, dataclasses, TypedDicts and NamedTuples
resolve their string annotations lazily in the namespace of the module ``__module__`` names, and the
public modules do not hold every name those annotations use.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Mapping

import msgspec

_PACKAGE = "ds4_context_core"


def _is_private(module_name: str) -> bool:
    parts = module_name.split(".")
    return parts[0] == _PACKAGE and any(part.startswith("_") for part in parts[1:])


def _is_record(value: type) -> bool:
    return (
        issubclass(value, msgspec.Struct)
        or hasattr(value, "__pydantic_fields__")
        or dataclasses.is_dataclass(value)
        or typing.is_typeddict(value)
        or (issubclass(value, tuple) and hasattr(value, "_fields"))
    )


def adopt_public_names(module_name: str, namespace: Mapping[str, object]) -> None:
    """Name ``module_name`` as the home of each exported class and function still named after a room."""
    exported = namespace.get("__all__", ())
    if not isinstance(exported, list | tuple):
        raise TypeError(f"{module_name}.__all__ must be a list or a tuple")
    for name in exported:
        value = namespace.get(name)
        if not ((isinstance(value, type) and not _is_record(value)) or inspect.isfunction(value)):
            continue
        if not _is_private(getattr(value, "__module__", "")):
            continue
        try:
            value.__module__ = module_name
        except (AttributeError, TypeError):  # a mypyc-compiled class keeps the name of its extension module
            continue
