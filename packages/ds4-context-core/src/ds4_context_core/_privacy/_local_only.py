"""Messages flagged ``localOnly``: their content is classified ``local-only`` before any payload is built.

The flag lives on canonical messages, but privacy is enforced on provider payloads, where flags no longer
exist (an OpenAI or Anthropic message has nowhere to keep them). So every piece of text such a message
carries is wrapped in a ``local-only`` marker span while the payload is still canonical; the payload
sanitizer then blocks it for remote providers and strips the markers for local ones, like any span an
author marked by hand.

Structure is content too: a tool call's name and its arguments' keys and numbers say as much as its
strings (``lookup_patient_Jane_Doe(ssn=123456789)``). So a flagged call's arguments are carried as one
marked JSON text under :data:`LOCAL_ONLY_KEY` (a remote provider sees that key and a placeholder, a local
one gets the arguments back as they were), and tool names are marked (a remote provider sees
``ds4_excluded``). Opaque blocks (provider parts and message-level fields this library does not model)
are carried the same way under :data:`LOCAL_ONLY_VALUE_KEY`: a part keeps only its ``type``, a fields
block only the library's own ``__ds4_`` marks that tell a writer how to lay the message out; every other
key, number and string goes into the marked JSON text, which a local provider gets back in place.

The text inside is first cleared of marker tags of its own, escaped ones included: a tag inside could
otherwise close the wrapper early (and an escape does not survive being embedded in a JSON string, such
as OpenAI tool-call arguments). Tags never reach a provider anyway, so a local provider loses nothing but
the literal text of an escaped tag.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

import msgspec

from ds4_context_core._exceptions import PrivacyEnforcementError
from ds4_context_core._history._model import (
    CanonicalBlock,
    CanonicalMessage,
    FileReferenceBlock,
    ImageBlock,
    OpaqueProviderBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
)

from ._walk import (
    _LOCAL_ONLY_CLOSE,
    _LOCAL_ONLY_OPEN,
    _MARKER,
    LOCAL_ONLY_KEY,
    LOCAL_ONLY_VALUE_KEY,
    RAW_ARGUMENTS_KEY,
)

__all__ = ["mark_local_only_messages"]

_OPEN: Final = _LOCAL_ONLY_OPEN
_CLOSE: Final = _LOCAL_ONLY_CLOSE
# Any tag the sanitizer would see, with every backslash in front of it: escaped or not, it goes.
_TAG: Final = re.compile(r"\\*" + _MARKER.pattern, _MARKER.flags)


def _wrap(text: str) -> str:
    inner = _TAG.sub("", text) if "[" in text else text
    if inner.endswith("\\"):
        inner += " "  # a trailing backslash would escape the closing tag
    return f"{_OPEN}{inner}{_CLOSE}"


# Keys of a fields block that writers read as instructions (how to lay a message out, which extra keys
# each call had): kept outside the marked text. Their values are the library's, or hold marked ones.
_MARK_HEAD: Final = "__ds4_"
_PER_CALL_FIELDS: Final = ("callFields", "toolUseFields")  # Responses (a list), Anthropic (by call id)


def _marked_value(value: Any) -> dict[str, str]:
    """``value`` (any JSON) as one marked JSON text: keys, numbers and strings alike stay local."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        raise PrivacyEnforcementError(
            "privacy-unsupported-value", "a local-only opaque block holds a value that is not JSON"
        ) from None
    return {LOCAL_ONLY_VALUE_KEY: _wrap(text)}


def _marked_part(part: Mapping[str, Any]) -> dict[str, Any]:
    """A provider part: its ``type`` (structure a provider needs to read it), the rest marked."""
    kind = part.get("type")
    head = {"type": kind} if isinstance(kind, str) else {}
    return {**head, **_marked_value(dict(part))}


def _marked_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """A fields block: the library's marks and ``type`` as they are, per-call extras each marked, the rest
    as one marked text standing where the first of its keys stood."""
    kept: dict[str, Any] = {}
    rest: dict[str, Any] = {}
    for key, value in fields.items():
        if (key == "type" and isinstance(value, str)) or str(key).startswith(_MARK_HEAD):
            kept[key] = value
        elif key == _PER_CALL_FIELDS[0] and isinstance(value, list):
            kept[key] = [_marked_fields(item) if isinstance(item, Mapping) else item for item in value]
        elif key == _PER_CALL_FIELDS[1] and isinstance(value, Mapping):
            kept[key] = {
                call: _marked_fields(item) if isinstance(item, Mapping) else item
                for call, item in value.items()
            }
        else:
            if not rest:
                kept[LOCAL_ONLY_VALUE_KEY] = None  # its place, filled below
            rest[key] = value
    if rest:
        kept.update(_marked_value(rest))
    return kept


def _marked_opaque(block: OpaqueProviderBlock) -> Any:
    value = block.value
    if isinstance(value, str):
        return _wrap(value)
    if value is None or isinstance(value, bool):
        return value
    if not isinstance(value, Mapping):
        return _marked_value(value)
    if (block.original_type or "").endswith(":fields"):
        return _marked_fields(value)
    return _marked_part(value)


def _arguments_text(arguments: Mapping[str, Any]) -> str:
    """The arguments as the JSON text formats that carry them as text send (verbatim raw arguments)."""
    raw = arguments.get(RAW_ARGUMENTS_KEY)
    if isinstance(raw, str) and len(arguments) == 1:
        return raw
    return json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))


def _mark_block(block: CanonicalBlock) -> CanonicalBlock:
    replace = msgspec.structs.replace
    if isinstance(block, TextBlock):
        return replace(block, text=_wrap(block.text))
    if isinstance(block, ThinkingBlock):
        return replace(block, thinking=_wrap(block.thinking))
    if isinstance(block, ToolResultBlock):
        name = block.tool_name and _wrap(block.tool_name)
        return replace(block, content=_wrap(block.content), tool_name=name)
    if isinstance(block, ToolCallBlock):
        arguments = {LOCAL_ONLY_KEY: _wrap(_arguments_text(block.arguments))}
        return replace(block, name=_wrap(block.name), arguments=arguments)
    if isinstance(block, ImageBlock):
        return block if block.data is None else replace(block, data=_wrap(block.data))
    if isinstance(block, FileReferenceBlock):
        return replace(block, path=_wrap(block.path))
    if isinstance(block, OpaqueProviderBlock):
        return replace(block, value=_marked_opaque(block))
    return block  # artifact and summary references hold ids only


def mark_local_only_messages(messages: Iterable[CanonicalMessage]) -> tuple[CanonicalMessage, ...]:
    """``messages`` with the content of every ``flags.local_only`` message in a ``local-only`` span.

    Ids, roles and tool-call ids stay as they are, so tool groups still pair up; other messages
    are returned as the same objects. Build provider payloads from the result: payload privacy then keeps
    the flagged content away from remote providers and gives local ones the text without the markers.
    """
    return tuple(
        msgspec.structs.replace(message, blocks=tuple(map(_mark_block, message.blocks)))
        if message.flags.local_only
        else message
        for message in messages
    )
