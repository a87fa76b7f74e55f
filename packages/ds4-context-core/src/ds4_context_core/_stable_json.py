"""Stable JSON and sha256 hashing of Python values.

Rules (pinned by golden vectors in the tests and documented in docs/concepts.md):

* object keys are sorted by code point; output has no whitespace; non-ASCII is written as UTF-8;
* ``None`` -> ``null``; ``bool`` -> ``true``/``false``; ``int`` -> decimal;
* a finite ``float`` with an integral value below 2**53 is written as an integer (``1.0`` -> ``1``),
  as JavaScript writes it; other finite floats use the shortest round-trip form;
* ``nan``, ``inf``, ``-inf`` -> the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``;
* ``bytes``/``bytearray``/``memoryview`` -> the string ``"[bytes:N]"`` (N = length);
* ``tuple``/``list`` -> arrays; ``msgspec.Struct`` -> its wire (camelCase) object;
* non-string keys ``int``/``float``/``bool``/``None`` become their JSON text (``1`` -> ``"1"``,
  ``True`` -> ``"true"``); two keys that collide after conversion raise ``StableJsonError``;
* a container that contains itself -> ``"[circular]"``;
* any other type raises ``StableJsonError`` (code ``stable-json-unsupported-type``).
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import msgspec

from ._exceptions import StableJsonError

__all__ = ["sha256_hex", "stable_hash", "stable_json", "stable_json_bytes"]

_MAX_SAFE_INTEGER = 2**53
_encoder = msgspec.json.Encoder(order="sorted")


def _float(value: float) -> float | int | str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value.is_integer() and abs(value) < _MAX_SAFE_INTEGER:
        return int(value)
    return value


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if key is None:
        return "null"
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, int):
        return str(key)
    if isinstance(key, float):
        converted = _float(key)
        return converted if isinstance(converted, str) else repr(converted)
    raise StableJsonError(
        "stable-json-unsupported-key",
        f"object keys must be str, int, float, bool or None, not {type(key).__name__}",
    )


def _normalise(value: Any, active: set[int]) -> Any:
    # Fast path for the overwhelmingly common leaf types.
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is float:
        return _float(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return f"[bytes:{len(value)}]"
    if isinstance(value, msgspec.Struct):
        value = msgspec.to_builtins(value)
    if isinstance(value, dict | list | tuple):
        marker = id(value)
        if marker in active:
            return "[circular]"
        active.add(marker)
        try:
            if isinstance(value, dict):
                result: dict[str, Any] = {}
                for key, item in value.items():
                    text = _key(key)
                    if text in result:
                        raise StableJsonError(
                            "stable-json-key-collision", "two object keys map to the same JSON key"
                        )
                    result[text] = _normalise(item, active)
                return result
            return [_normalise(item, active) for item in value]
        finally:
            active.discard(marker)
    if isinstance(value, int):  # int subclasses such as IntEnum
        return int(value)
    if isinstance(value, float):
        return _float(float(value))
    if isinstance(value, str):
        return str(value)
    raise StableJsonError(
        "stable-json-unsupported-type", f"no stable JSON form for values of type {type(value).__name__}"
    )


def stable_json_bytes(value: Any) -> bytes:
    """Encode ``value`` as stable JSON (UTF-8 bytes) following the module rules."""
    return _encoder.encode(_normalise(value, set()))


def stable_json(value: Any) -> str:
    """Encode ``value`` as a stable JSON string."""
    return stable_json_bytes(value).decode("utf-8")


def sha256_hex(data: bytes | str) -> str:
    """Lowercase hex sha256 of bytes, or of a string's UTF-8 encoding."""
    return hashlib.sha256(data.encode("utf-8") if isinstance(data, str) else data).hexdigest()


def stable_hash(value: Any) -> str:
    """Lowercase hex sha256 of ``stable_json_bytes(value)``."""
    return hashlib.sha256(stable_json_bytes(value)).hexdigest()
