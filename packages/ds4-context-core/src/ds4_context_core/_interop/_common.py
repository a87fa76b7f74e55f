"""Shared pieces of the provider-format converters: identities, fields blocks, argument handling.

Conventions every converter follows:

* a canonical message gets id ``<session_id>:<entry_prefix><index:06d>`` (index = position of the
  canonical message), so converting a longer version of an append-only history keeps earlier ids;
* a provider part we do not model becomes ``OpaqueProviderBlock(original_type="<format>:<type>")``
  holding the whole part, and is written back only by the same format;
* message-level keys we do not model are kept in one trailing opaque block ``<format>:fields``
  (a dict) and merged back on export, so a round trip loses nothing;
* tool-call arguments that are not a JSON object are kept as text under ``RAW_ARGUMENTS_KEY``; the
  original text of arguments that are one is kept too (``ARGUMENTS_TEXT_MARK``) and written back while
  the arguments are unchanged, so the bytes a provider cached stay the same;
* input is made plain first (:func:`plain_items`): SDK objects (pydantic models) by their JSON dump
  without unset (None) fields; in dicts, a key whose value is None is read as absent when a part's shape
  is recognised (:func:`shape`), as an SDK's plain ``model_dump()`` writes every unset optional field.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, TypeGuard

from ds4_context_core._exceptions import HistoryRecordError, InteropFormatError
from ds4_context_core._history._decode import HISTORY_MAX_NESTING_DEPTH, check_message_nesting
from ds4_context_core._history._model import (
    ArtifactReferenceBlock,
    CanonicalBlock,
    CanonicalMessage,
    FileReferenceBlock,
    MessageFlags,
    MessageRole,
    OpaqueProviderBlock,
    Provenance,
    SummaryReferenceBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from ds4_context_core._history._validation import escaped_prefix

__all__ = [
    "INTEROP_ERROR_CODES",
    "INTEROP_FORMATS",
    "RAW_ARGUMENTS_KEY",
    "MessageFactory",
    "arguments_from_text",
    "arguments_to_text",
    "fail",
    "fields_of",
    "reference_text",
    "require_items",
    "require_mapping",
    "require_str",
]

INTEROP_FORMATS: Final = ("openai-chat", "openai-responses", "anthropic")
RAW_ARGUMENTS_KEY: Final = "__ds4_raw_arguments"
# Kept in a fields block: string content arrived as a list of parts, so export writes a list again.
PARTS_MARK: Final = "__ds4_content_parts"
# Kept in a fields block: the original argument text of each call id whose text is not what we would write.
ARGUMENTS_TEXT_MARK: Final = "__ds4_arguments_text"
# Kept in a fields block: the ids of the calls that were OpenAI custom tool calls (free-form input).
CUSTOM_CALLS_MARK: Final = "__ds4_custom_calls"
# Deeper than this, a provider message is refused instead of walked: the history decoders' own limit.
PLAIN_MAX_DEPTH: Final = HISTORY_MAX_NESTING_DEPTH
# The value under these keys is a tool's input: its nulls are the caller's, kept as they are.
_VERBATIM_KEYS: Final = frozenset({"input"})
INTEROP_ERROR_CODES: Final = (
    "interop-message-invalid",
    "interop-role-unknown",
    "interop-content-invalid",
    "interop-tool-call-invalid",
    "interop-tool-result-invalid",
    "interop-block-unsupported",
    "interop-nesting-too-deep",
)
_TOO_DEEP: Final = f"values nest deeper than {HISTORY_MAX_NESTING_DEPTH} levels"


def fail(code: str, detail: str, path: str) -> InteropFormatError:
    return InteropFormatError(code, f"{detail} (at {path})", path=path)


def _plain(value: Any, path: str, depth: int) -> Any:
    """``value`` with every SDK object in it replaced by its JSON dump (``path`` names the top item)."""
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if depth > PLAIN_MAX_DEPTH:
        raise fail("interop-nesting-too-deep", _TOO_DEEP, path)
    if isinstance(value, Mapping):
        return {
            key: item if key in _VERBATIM_KEYS else _plain(item, path, depth + 1)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [_plain(item, path, depth + 1) for item in value]
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, type):
        try:
            dumped = dump(mode="json", exclude_none=True, by_alias=True)
        except Exception as error:  # an SDK object of a version we do not know
            raise fail(
                "interop-message-invalid", f"{type(value).__name__[:40]}.model_dump() failed", path
            ) from error
        return _plain(dumped, path, depth + 1)
    return value


def plain_items(items: Any, path: str = "$") -> list[Any]:
    """A list of provider messages or items as plain values (see the module docstring)."""
    dump = getattr(items, "model_dump", None)
    if callable(dump) or isinstance(items, str | bytes | Mapping) or not isinstance(items, Iterable):
        raise fail(
            "interop-message-invalid",
            f"expected a list of messages (dicts or SDK objects), got one {type(items).__name__[:40]}",
            path,
        )
    return [_plain(item, f"{path}[{index}]", 1) for index, item in enumerate(items)]


def plain_value(value: Any, path: str = "$") -> Any:
    """One provider value (a payload, a message) as a plain value (see the module docstring)."""
    return _plain(value, path, 0)


def shape(part: Mapping[str, Any]) -> set[str]:
    """The keys of ``part`` that carry a value (None is an unset optional field, not a different shape)."""
    return {key for key, value in part.items() if value is not None}


def require_mapping(value: Any, path: str, code: str = "interop-message-invalid") -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise fail(
            code, f"expected an object (a dict or an SDK object), got {type(value).__name__[:40]}", path
        )
    return value


def require_items(value: Any, noun: str) -> Iterable[Any]:
    """The top-level list of a payload; anything not iterable (or a string, bytes, an object) is refused."""
    if isinstance(value, str | bytes | bytearray | Mapping) or not isinstance(value, Iterable):
        raise fail("interop-message-invalid", f"{noun} must be a list", "$")
    return value


def require_str(value: Any, path: str, code: str) -> str:
    if not isinstance(value, str):
        raise fail(code, f"expected a string, got {type(value).__name__[:40]}", path)
    return value


def arguments_from_text(text: Any, path: str) -> dict[str, Any]:
    """Parse a JSON-encoded argument string; anything that is not a JSON object is kept verbatim."""
    if isinstance(text, Mapping):
        return dict(text)
    if not isinstance(text, str):
        raise fail("interop-tool-call-invalid", "tool call arguments must be a JSON string", path)
    try:
        parsed = json.loads(text)
    except ValueError:
        return {RAW_ARGUMENTS_KEY: text}
    except RecursionError:
        raise fail("interop-nesting-too-deep", "tool call arguments: " + _TOO_DEEP, path) from None
    if isinstance(parsed, dict) and RAW_ARGUMENTS_KEY not in parsed:
        return parsed
    return {RAW_ARGUMENTS_KEY: text}


def arguments_to_text(arguments: Mapping[str, Any], original: Any = None) -> str:
    """The argument text to send: ``original`` (the text the call arrived with) while it still says the
    same thing, so the bytes do not change, else our compact JSON."""
    raw = arguments.get(RAW_ARGUMENTS_KEY)
    if isinstance(raw, str) and len(arguments) == 1:
        return raw
    try:
        written = json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
    except RecursionError:
        raise fail("interop-nesting-too-deep", "tool call arguments: " + _TOO_DEEP, "$") from None
    if isinstance(original, str) and original != written and _same_json(original, arguments):
        return original
    return written


def _same_json(text: str, arguments: Mapping[str, Any]) -> bool:
    try:
        parsed = json.loads(text)
    except ValueError:
        return False
    # sort_keys and exact dumps: 1 == 1.0 == True in Python, but not in the text a provider reads.
    return json.dumps(parsed, sort_keys=True) == json.dumps(arguments, sort_keys=True)


def original_arguments_text(text: Any, arguments: Mapping[str, Any]) -> str | None:
    """``text`` when it parsed into ``arguments`` but is not what :func:`arguments_to_text` would write."""
    if not isinstance(text, str) or RAW_ARGUMENTS_KEY in arguments:
        return None
    written = json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
    return None if text == written else text


def arguments_object(arguments: Mapping[str, Any], path: str) -> dict[str, Any]:
    """For formats that carry arguments as an object (Anthropic ``input``)."""
    raw = arguments.get(RAW_ARGUMENTS_KEY)
    if isinstance(raw, str) and len(arguments) == 1:
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = None
        except RecursionError:
            raise fail("interop-nesting-too-deep", "tool call arguments: " + _TOO_DEEP, path) from None
        if isinstance(parsed, dict):
            return parsed
        raise fail("interop-tool-call-invalid", "tool call arguments are not a JSON object", path)
    return dict(arguments)


def is_fields(block: CanonicalBlock, fmt: str) -> TypeGuard[OpaqueProviderBlock]:
    """Whether ``block`` is the trailing fields block that format ``fmt`` keeps message-level keys in."""
    return type(block) is OpaqueProviderBlock and block.original_type == f"{fmt}:fields"


def fields_of(message: CanonicalMessage, fmt: str) -> dict[str, Any]:
    """The message-level keys a format kept in its trailing fields block (empty when there is none)."""
    for block in message.blocks:
        if is_fields(block, fmt):
            value = block.value
            return dict(value) if isinstance(value, Mapping) else {}
    return {}


def reference_text(block: CanonicalBlock) -> str | None:
    """How a reference block reads to a provider, or None when the block is not a reference."""
    kind = type(block)
    if kind is FileReferenceBlock:
        return f"[file: {block.path}]"  # type: ignore[union-attr]
    if kind is ArtifactReferenceBlock:
        return f"[artifact: {block.artifact_id}]"  # type: ignore[union-attr]
    if kind is SummaryReferenceBlock:
        return f"[summary: {block.summary_id}]"  # type: ignore[union-attr]
    return None


_ATOMIC_FLAGS: Final = MessageFlags(atomic=True)
_NO_FLAGS: Final = MessageFlags()


class MessageFactory:
    """Makes canonical messages with deterministic ids and provenance for one converted history."""

    def __init__(self, *, fmt: str, session_id: str, runtime_id: str | None, entry_prefix: str) -> None:
        self.fmt = fmt
        self.session_id = session_id
        self.runtime_id = runtime_id
        self.entry_prefix = entry_prefix
        self.messages: list[CanonicalMessage] = []
        self.tool_names: dict[str, str] = {}
        self._source: Final = "runtime-session" if runtime_id is not None else "pi-session"
        # Keys of the tool calls being read that the block does not model, by call id (Anthropic).
        self.call_fields: dict[str, dict[str, Any]] = {}

    def add(
        self,
        role: MessageRole,
        blocks: Sequence[CanonicalBlock],
        *,
        fields: Mapping[str, Any] | None = None,
        original_role: str | None = None,
    ) -> None:
        all_blocks = tuple(blocks)
        if fields:
            fields_block = OpaqueProviderBlock(original_type=f"{self.fmt}:fields", value=dict(fields))
            all_blocks = (*all_blocks, fields_block)
        entry_id = f"{self.entry_prefix}{len(self.messages):06d}"
        atomic = nested = False
        for block in all_blocks:
            kind = type(block)
            if kind is ToolCallBlock:
                self.tool_names[block.id] = block.name  # type: ignore[union-attr]
                atomic = nested = True
            elif kind is ToolResultBlock:
                atomic = True
            elif kind is OpaqueProviderBlock:
                nested = True
        message = CanonicalMessage(
            id=f"{self.session_id}:{entry_id}",
            source_entry_id=entry_id,
            role=role,
            blocks=all_blocks,
            provenance=Provenance(
                source=self._source,
                session_id=self.session_id,
                entry_id=entry_id,
                original_role=original_role,
                runtime_id=self.runtime_id,
            ),
            flags=_ATOMIC_FLAGS if atomic else _NO_FLAGS,  # frozen: one instance serves every message
        )
        if nested:  # only arguments and opaque values nest; text blocks cannot pass the limit
            try:
                # The history decoders refuse deeper messages, so a converter never makes one.
                check_message_nesting((message,))
            except HistoryRecordError:
                index = len(self.messages)
                raise fail(
                    "interop-nesting-too-deep", f"canonical message {index}: {_TOO_DEEP}", "$"
                ) from None
        self.messages.append(message)

    def tool_name(self, call_id: str) -> str:
        return self.tool_names.get(call_id, "")


def content_blocks(
    content: Any,
    path: str,
    read_part: Callable[[Mapping[str, Any], str], CanonicalBlock],
    *,
    parts_noun: str = "parts",
) -> tuple[list[CanonicalBlock], bool]:
    """Blocks of a content value (a string, or a list of parts each read by ``read_part(part, path)``),
    and whether it was a list of parts."""
    if isinstance(content, str):
        return [TextBlock(text=content)], False
    if not isinstance(content, list):
        raise fail("interop-content-invalid", f"content must be a string or a list of {parts_noun}", path)
    blocks: list[CanonicalBlock] = []
    for index, raw in enumerate(content):
        part_path = f"{path}[{index}]"
        blocks.append(read_part(require_mapping(raw, part_path, "interop-content-invalid"), part_path))
    return blocks, True


def opaque(fmt: str, part: Mapping[str, Any]) -> OpaqueProviderBlock:
    kind = part.get("type")
    label = kind if isinstance(kind, str) and kind else "part"
    return OpaqueProviderBlock(original_type=f"{fmt}:{escaped_prefix(label, 64)}", value=dict(part))


def own_opaque(block: CanonicalBlock, fmt: str) -> dict[str, Any] | None:
    """The original part of an opaque block made by ``fmt`` (not its fields block), else None."""
    if type(block) is not OpaqueProviderBlock:
        return None
    original_type = block.original_type or ""
    if not original_type.startswith(fmt + ":") or original_type == f"{fmt}:fields":
        return None
    value = block.value
    return dict(value) if isinstance(value, Mapping) else None


def data_url(mime_type: str | None, data: str | None) -> str:
    return f"data:{mime_type or 'application/octet-stream'};base64,{data or ''}"


def parse_data_url(url: Any) -> tuple[str, str] | None:
    """(mime type, base64 data) of a ``data:<mime>;base64,<data>`` URL, else None."""
    if not isinstance(url, str) or not url.startswith("data:"):
        return None
    header, comma, data = url[5:].partition(",")
    if not comma or not header.endswith(";base64"):
        return None
    mime = header[: -len(";base64")]
    return (mime, data) if mime else None
