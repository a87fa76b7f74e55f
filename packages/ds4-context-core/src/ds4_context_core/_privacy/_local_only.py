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
``ds4_excluded``).

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

from ._walk import _LOCAL_ONLY_CLOSE, _LOCAL_ONLY_OPEN, _MARKER, LOCAL_ONLY_KEY, RAW_ARGUMENTS_KEY

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


def _wrap_values(value: Any) -> Any:
    """Every string inside ``value`` wrapped; mapping keys are left alone (they name, they do not say)."""
    if isinstance(value, str):
        return _wrap(value)
    if isinstance(value, dict):
        return {key: _wrap_values(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_wrap_values(item) for item in value]
    return value


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
        return replace(block, value=_wrap_values(block.value))
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
