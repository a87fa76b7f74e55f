"""The seam to the core interop converters (canonical messages -> provider payload shapes).

Transports never convert messages themselves: the one conversion lives in ``ds4_context_core.interop``.
It is looked up when first used, so a missing converter is a coded configuration error, not an import
failure of the whole engine.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol

from ds4_context_core import CanonicalMessage

from ._errors import ProviderConfigurationError

__all__ = ["INTEROP_MODULE", "MessageConverter", "interop_converter"]

INTEROP_MODULE: Final = "ds4_context_core.interop"


class MessageConverter(Protocol):
    def __call__(self, messages: Sequence[CanonicalMessage], /) -> Any: ...


def interop_converter(name: str) -> Callable[[Sequence[CanonicalMessage]], Any]:
    """The core converter ``name``; raises ``provider-interop-unavailable`` when core does not have it."""
    try:
        module = importlib.import_module(INTEROP_MODULE)
    except ImportError as error:
        raise ProviderConfigurationError(
            "provider-interop-unavailable", f"{INTEROP_MODULE} is not available in this ds4-context-core"
        ) from error
    function = getattr(module, name, None)
    if not callable(function):
        raise ProviderConfigurationError(
            "provider-interop-unavailable",
            f"{INTEROP_MODULE}.{name} is not available in this ds4-context-core",
        )
    converter: Callable[[Sequence[CanonicalMessage]], Any] = function
    return converter
