"""Errors raised on purpose by the provider layer.

The classes are defined in ``ds4_context_engine._exceptions`` (the engine's one exception module, whose
docstring draws the tree) and re-exported here for the provider modules. Every class carries a stable
kebab-case ``code``. Messages never contain prompts, payloads, API keys or
response bodies; a bad identifier is echoed at most as a short, escaped prefix.
"""

from __future__ import annotations

import unicodedata
from typing import Final

from ds4_context_engine._exceptions import LocalProviderError, ModelReferenceError, ProviderConfigurationError

__all__ = [
    "ECHO_MAX_BYTES",
    "PROVIDER_CONFIGURATION_ERROR_CODES",
    "LocalProviderError",
    "ModelReferenceError",
    "ProviderConfigurationError",
    "escape_echo",
]

# Shorter than the shortest key any privacy rule knows by its shape (an OpenAI key is "sk-" and 16 more,
# an AWS key id 20 characters): an echoed value can show where a typo is, never a whole pasted key.
ECHO_MAX_BYTES: Final = 16
PROVIDER_CONFIGURATION_ERROR_CODES: Final = (
    "provider-invalid-base-url",
    "provider-invalid-id",
    "provider-invalid-timeout",
    "provider-unknown-transport",
)
_ELLIPSIS: Final = "...[truncated]"
_INVISIBLE_CATEGORIES: Final = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})


def _escape_char(char: str) -> str:
    if char == "\\":
        return "\\\\"
    if char == '"':
        return '\\"'
    if unicodedata.category(char) in _INVISIBLE_CATEGORIES:
        point = ord(char)
        return f"\\u{point:04x}" if point <= 0xFFFF else f"\\U{point:08x}"
    return char


def escape_echo(text: str, max_bytes: int = ECHO_MAX_BYTES) -> str:
    """Quote ``text`` for an error message: invisible characters escaped, at most ``max_bytes`` of input.

    Truncation never splits a character; a marker says the value was cut.
    """
    kept: list[str] = []
    used = 0
    truncated = False
    for char in text:
        size = len(char.encode("utf-8", "surrogatepass"))
        if used + size > max_bytes:
            truncated = True
            break
        used += size
        kept.append(_escape_char(char))
    return '"' + "".join(kept) + '"' + (_ELLIPSIS if truncated else "")
