"""Stable JSON (``stable-json-v1``) and sha256 hashing of Python values.

The rules (written down for users in docs/core/history.md, pinned by golden vectors in the tests) aim
at byte equality with the original TypeScript ``stableStringify`` for every JSON value, and at one
documented answer for each Python value JSON has no word for:

* objects: keys sorted by UTF-16 code units (what JavaScript's default sort does; equal to code point
  order except between astral characters and U+E000..U+FFFF); no whitespace anywhere;
* strings: UTF-8, escaping only ``"``, ``\\`` and C0 controls (``\\b \\t \\n \\f \\r``, others as
  lowercase ``\\u00xx``); a lone surrogate is written as a ``\\udxxx`` escape, as JavaScript does;
* ``None`` -> ``null``; ``True``/``False`` -> ``true``/``false``; ``int`` -> exact decimal, any size;
* finite ``float`` -> JavaScript's ``Number#toString`` form (``1.0`` -> ``1``, ``1e21`` -> ``1e+21``,
  ``1.5e-7`` -> ``1.5e-7``, ``-0.0`` -> ``0``); ``nan``/``inf``/``-inf`` -> the strings ``"NaN"``,
  ``"Infinity"``, ``"-Infinity"``;
* ``bytes``/``bytearray``/``memoryview`` -> the string ``"[bytes:N]"`` (N = number of bytes);
* ``list`` and ``tuple`` -> arrays; ``msgspec.Struct`` -> its wire object as ``msgspec.to_builtins``
  gives it (camelCase, unset optional fields omitted; values msgspec knows inside it, such as datetimes,
  become msgspec's wire strings), then these rules;
* object keys that are not strings: ``int`` -> decimal, ``float`` -> its number text, ``bool`` ->
  ``"true"``/``"false"``, ``None`` -> ``"null"``; keys that collide after conversion raise
  ``stable-json-key-collision``; any other key type, or a key holding a lone surrogate, raises
  ``stable-json-unsupported-key``;
* a list, tuple or dict met again while inside itself -> the string ``"[circular]"`` (shared but not
  circular values are written in full each time);
* subclasses of ``str``, ``int`` and ``float`` (enums among them) are written as their base value;
* nesting deeper than ``STABLE_JSON_MAX_DEPTH`` raises ``stable-json-too-deep``; any other type (set,
  datetime, Decimal, dataclass, ...) raises ``stable-json-unsupported-type``.

Hashes are the lowercase hex sha256 of those UTF-8 bytes, with no prefix.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any, Final

import msgspec

from ds4_context_core._exceptions import StableJsonError

__all__ = [
    "STABLE_JSON_ERROR_CODES",
    "STABLE_JSON_MAX_DEPTH",
    "STABLE_JSON_VERSION",
    "sha256_hex",
    "stable_hash",
    "stable_json",
    "stable_json_bytes",
]

STABLE_JSON_VERSION: Final = "stable-json-v1"
STABLE_JSON_MAX_DEPTH: Final = 256
STABLE_JSON_ERROR_CODES: Final = (
    "stable-json-unsupported-type",
    "stable-json-unsupported-key",
    "stable-json-key-collision",
    "stable-json-too-deep",
)

# Keys are put in order by us (UTF-16 order), so the encoder must keep insertion order.
_encoder = msgspec.json.Encoder()
_PASS_THROUGH = (bytes, bytearray, memoryview)


def _js_number_text(value: float) -> str:
    """ECMAScript Number::toString for a finite float, built from Python's shortest round-trip digits."""
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    mantissa, _, exponent_text = repr(abs(value)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    exponent = int(exponent_text) if exponent_text else 0
    if whole == "0":
        stripped = fraction.lstrip("0")
        point = exponent - (len(fraction) - len(stripped))
        digits = stripped
    else:
        digits = whole + fraction
        point = exponent + len(whole)
    digits = digits.rstrip("0")
    # value == 0.<digits> * 10**point, with the fewest digits: now apply the ECMAScript layout rules.
    count = len(digits)
    if count <= point <= 21:
        return sign + digits + "0" * (point - count)
    if 0 < point <= 21:
        return sign + digits[:point] + "." + digits[point:]
    if -6 < point <= 0:
        return sign + "0." + "0" * -point + digits
    power = point - 1
    exponent_part = ("e+" if power >= 0 else "e-") + str(abs(power))
    if count == 1:
        return sign + digits + exponent_part
    return sign + digits[0] + "." + digits[1:] + exponent_part


def _float(value: float) -> msgspec.Raw | str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return msgspec.Raw(_js_number_text(value).encode("ascii"))


def _string(value: str) -> str | msgspec.Raw:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        # Lone surrogates cannot be UTF-8; write them as escapes the way JavaScript's JSON.stringify does.
        pieces = [
            f"\\u{ord(char):04x}" if 0xD800 <= ord(char) <= 0xDFFF else _encoder.encode(char)[1:-1].decode()
            for char in value
        ]
        return msgspec.Raw(('"' + "".join(pieces) + '"').encode("utf-8"))
    return value


def _key(key: Any) -> str:
    kind = type(key)
    if kind is str:
        return key  # type: ignore[no-any-return]
    if key is None:
        return "null"
    if kind is bool:
        return "true" if key else "false"
    if isinstance(key, str):
        return str.__str__(key)
    if isinstance(key, int):
        return str(int(key))
    if isinstance(key, float):
        converted = _float(float(key))
        return converted if isinstance(converted, str) else bytes(converted).decode("ascii")
    raise StableJsonError(
        "stable-json-unsupported-key",
        f"object keys must be str, int, float, bool or None, not {type(key).__name__[:40]}",
    )


def _check_key_encodable(key: str) -> None:
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        raise StableJsonError(
            "stable-json-unsupported-key",
            "an object key holds a lone surrogate, which JSON keys cannot carry here",
        ) from None


def _utf16_order(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def _normalise(value: Any, active: set[int], depth: int) -> Any:
    kind = type(value)
    if kind is str:
        return value if value.isascii() else _string(value)
    if kind is int or kind is bool or value is None:
        return value
    if kind is float:
        return _float(value)
    if depth > STABLE_JSON_MAX_DEPTH:
        raise StableJsonError(
            "stable-json-too-deep", f"values nest deeper than {STABLE_JSON_MAX_DEPTH} levels"
        )
    if kind is dict or kind is list or kind is tuple:
        return _container(value, active, depth)
    if isinstance(value, _PASS_THROUGH):
        size = value.nbytes if isinstance(value, memoryview) else len(value)
        return f"[bytes:{size}]"
    if isinstance(value, msgspec.Struct):
        return _normalise(msgspec.to_builtins(value, builtin_types=_PASS_THROUGH), active, depth)
    if isinstance(value, bool):  # pragma: no cover - bool cannot be subclassed
        return bool(value)
    if isinstance(value, str):
        # str.__str__ gives the characters themselves; str() of a str enum would give "Name.MEMBER".
        return _normalise(str.__str__(value), active, depth)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return _float(float(value))
    if isinstance(value, dict | list | tuple):
        return _container(value, active, depth)
    raise StableJsonError(
        "stable-json-unsupported-type",
        f"no stable JSON form for values of type {type(value).__name__[:40]}",
    )


def _container(value: Any, active: set[int], depth: int) -> Any:
    marker = id(value)
    if marker in active:
        return "[circular]"
    active.add(marker)
    try:
        if isinstance(value, dict):
            converted: dict[str, Any] = {}
            for key, item in value.items():
                text = _key(key)
                if text in converted:
                    raise StableJsonError(
                        "stable-json-key-collision", "two object keys map to the same JSON key"
                    )
                converted[text] = _normalise(item, active, depth + 1)
            keys = list(converted)
            if all(map(str.isascii, keys)):
                keys.sort()
            else:
                for key in keys:
                    _check_key_encodable(key)
                keys.sort(key=_utf16_order)
            return {key: converted[key] for key in keys}
        return [_normalise(item, active, depth + 1) for item in value]
    finally:
        active.discard(marker)


def stable_json_bytes(value: Any) -> bytes:
    """Encode ``value`` as stable JSON (UTF-8 bytes) following the module rules."""
    return _encoder.encode(_normalise(value, set(), 0))


def stable_json(value: Any) -> str:
    """Encode ``value`` as a stable JSON string."""
    return stable_json_bytes(value).decode("utf-8")


def sha256_hex(data: bytes | str) -> str:
    """Lowercase hex sha256 of bytes, or of a string's UTF-8 encoding."""
    return hashlib.sha256(data.encode("utf-8") if isinstance(data, str) else data).hexdigest()


def stable_hash(value: Any) -> str:
    """Lowercase hex sha256 of ``stable_json_bytes(value)``."""
    return hashlib.sha256(stable_json_bytes(value)).hexdigest()
