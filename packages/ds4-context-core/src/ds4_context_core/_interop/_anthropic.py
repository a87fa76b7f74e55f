"""Anthropic Messages payloads (``system`` + ``messages``, plain dicts) <-> canonical messages.

A user turn's ``tool_result`` blocks become one canonical ``tool`` message placed before the rest of the
turn; export joins them back into one user turn with the results first, as Anthropic requires, and
joins every run of messages of one role into one turn (Anthropic's turns alternate), so a parallel
batch's results always travel together and nothing is dropped. ``cache_control``
markers are transport hints and are not kept: the host sets cache points when it sends.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, NotRequired, TypedDict, cast

from ds4_context_core._history._model import (
    CanonicalBlock,
    CanonicalMessage,
    ImageBlock,
    OpaqueProviderBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
)

from ._common import (
    PARTS_MARK,
    RAW_ARGUMENTS_KEY,
    MessageFactory,
    arguments_object,
    content_blocks,
    fail,
    fields_of,
    is_fields,
    opaque,
    own_opaque,
    plain_items,
    plain_value,
    reference_text,
    require_mapping,
    require_str,
    shape,
)

if TYPE_CHECKING:  # the SDK's own request types, so SDK calls type-check without a cast; never imported
    from anthropic.types import MessageParam, TextBlockParam

__all__ = ["AnthropicPayload", "from_anthropic_messages", "to_anthropic_messages"]


class AnthropicPayload(TypedDict):
    """What :func:`to_anthropic_messages` returns: ``client.messages.create(..., **payload)`` type-checks."""

    messages: list[MessageParam]
    system: NotRequired[str | list[TextBlockParam]]


ANTHROPIC: Final = "anthropic"
_RESULT_CONTENT: Final = "toolResultContent"
_HINTS: Final = frozenset({"cache_control"})


_CALL_FIELDS: Final = "toolUseFields"


def _plain(part: Mapping[str, Any], keys: set[str]) -> bool:
    return shape(part) - _HINTS == keys


def _block(part: Mapping[str, Any], path: str, factory: MessageFactory) -> CanonicalBlock:
    kind = part.get("type")
    if kind == "text" and _plain(part, {"type", "text"}):
        return TextBlock(text=require_str(part["text"], f"{path}.text", "interop-content-invalid"))
    if kind == "thinking" and _plain(part, {"type", "thinking"}):
        return ThinkingBlock(
            thinking=require_str(part["thinking"], f"{path}.thinking", "interop-content-invalid")
        )
    source = part.get("source")
    if (
        kind == "image"
        and _plain(part, {"type", "source"})
        and isinstance(source, Mapping)
        and shape(source) == {"type", "media_type", "data"}
        and source.get("type") == "base64"
        and isinstance(source.get("media_type"), str)
        and isinstance(source.get("data"), str)
    ):
        return ImageBlock(mime_type=source["media_type"], data=source["data"])
    if kind == "tool_use" and {"type", "id", "name", "input"} <= set(part):
        arguments = part["input"]
        call = ToolCallBlock(
            id=require_str(part["id"], f"{path}.id", "interop-tool-call-invalid"),
            name=require_str(part["name"], f"{path}.name", "interop-tool-call-invalid"),
            arguments=dict(arguments)
            if isinstance(arguments, Mapping)
            else {RAW_ARGUMENTS_KEY: repr(arguments)},
        )
        # Keys we do not model (a server tool's ``caller``, ...) travel with the call, not instead of it.
        extra = {k: v for k, v in part.items() if k not in ("type", "id", "name", "input") and v is not None}
        if extra:
            factory.call_fields[call.id] = extra
        return call
    return opaque(ANTHROPIC, part)


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part["text"]
            for part in content
            if isinstance(part, Mapping) and part.get("type") == "text" and isinstance(part.get("text"), str)
        )
    return ""


def _blocks(content: Any, path: str, factory: MessageFactory) -> tuple[list[CanonicalBlock], bool]:
    return content_blocks(
        content, path, lambda part, part_path: _block(part, part_path, factory), parts_noun="blocks"
    )


def from_anthropic_messages(
    payload: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    *,
    session_id: str,
    runtime_id: str | None = "interop",
    entry_prefix: str = "",
) -> tuple[CanonicalMessage, ...]:
    """A Messages API payload (``{"system": ..., "messages": [...]}``) or a bare list of messages to
    canonical messages. Request parameters (model, max_tokens, tools) are not history and are ignored.
    """
    factory = MessageFactory(
        fmt=ANTHROPIC, session_id=session_id, runtime_id=runtime_id, entry_prefix=entry_prefix
    )
    payload = plain_value(payload) if isinstance(payload, Mapping) else plain_items(payload)
    if isinstance(payload, Mapping):
        system = payload.get("system")
        if system is not None:
            blocks, as_parts = _blocks(system, "$.system", factory)
            factory.add("system", blocks, fields={PARTS_MARK: True} if as_parts else None)
        messages = payload.get("messages", [])
        base = "$.messages"
    else:
        messages, base = payload, "$"
    if not isinstance(messages, Sequence) or isinstance(messages, str):
        raise fail("interop-message-invalid", "messages must be a list", base)
    for index, raw in enumerate(messages):
        path = f"{base}[{index}]"
        message = require_mapping(raw, path)
        role = message.get("role")
        if role not in ("user", "assistant"):
            raise fail("interop-role-unknown", "Anthropic roles are user and assistant", f"{path}.role")
        content = message.get("content")
        fields: dict[str, Any] = {k: v for k, v in message.items() if k not in ("role", "content")}
        if role == "user" and isinstance(content, list):
            results, rest_parts = _split_results(content, f"{path}.content", factory)
            if results:
                factory.add("tool", results[0], fields=results[1])
                if not rest_parts:
                    continue
                content = rest_parts
        blocks, as_parts = _blocks(content, f"{path}.content", factory)
        if as_parts:
            fields[PARTS_MARK] = True
        if factory.call_fields:
            fields[_CALL_FIELDS] = dict(factory.call_fields)
            factory.call_fields.clear()
        factory.add(role, blocks, fields=fields)
    return tuple(factory.messages)


def _split_results(
    content: list[Any], path: str, factory: MessageFactory
) -> tuple[tuple[list[CanonicalBlock], dict[str, Any]] | None, list[Any]]:
    results: list[CanonicalBlock] = []
    kept_content: dict[str, Any] = {}
    rest: list[Any] = []
    for index, raw in enumerate(content):
        part = require_mapping(raw, f"{path}[{index}]", "interop-content-invalid")
        if part.get("type") != "tool_result":
            rest.append(part)
            continue
        if not set(part) - _HINTS <= {"type", "tool_use_id", "content", "is_error"}:
            rest.append(part)  # a tool_result with keys we do not model stays whole, as an opaque block
            continue
        call_id = require_str(
            part.get("tool_use_id"), f"{path}[{index}].tool_use_id", "interop-tool-result-invalid"
        )
        body = part.get("content", "")
        if not isinstance(body, str):
            kept_content[call_id] = body  # restored verbatim on export; the block holds its text
        results.append(
            ToolResultBlock(
                tool_call_id=call_id,
                tool_name=factory.tool_name(call_id),
                content=_result_text(body),
                is_error=part.get("is_error") is True,
            )
        )
    if not results:
        return None, rest
    return (results, {_RESULT_CONTENT: kept_content} if kept_content else {}), rest


def _part(
    block: CanonicalBlock, strict: bool, kept: Mapping[str, Any], call_fields: Mapping[str, Any]
) -> dict[str, Any] | None:
    match block:
        case TextBlock(text=text):
            return {"type": "text", "text": text}
        case ThinkingBlock(thinking=thinking):
            return {"type": "thinking", "thinking": thinking}
        case ImageBlock(mime_type=mime_type, data=data):
            source = {
                "type": "base64",
                "media_type": mime_type or "application/octet-stream",
                "data": data or "",
            }
            return {"type": "image", "source": source}
        case ToolCallBlock(id=call_id, name=name, arguments=arguments):
            call = {
                "type": "tool_use",
                "id": call_id,
                "name": name,
                "input": arguments_object(arguments, "$"),
            }
            extra = call_fields.get(call_id)
            if isinstance(extra, Mapping):
                call.update(extra)
            return call
        case ToolResultBlock(tool_call_id=call_id, content=content, is_error=is_error):
            part: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": call_id,
                "content": kept.get(call_id, content),
            }
            if is_error:
                part["is_error"] = True
            return part
    reference = reference_text(block)
    if reference is not None:
        return {"type": "text", "text": reference}
    original = own_opaque(block, ANTHROPIC)
    if original is not None:
        return original
    if strict and type(block) is OpaqueProviderBlock:
        raise fail("interop-block-unsupported", "an opaque block from another format cannot be written", "$")
    return None


def to_anthropic_messages(messages: Iterable[CanonicalMessage], *, strict: bool = False) -> AnthropicPayload:
    """Canonical messages to ``{"system": ..., "messages": [...]}`` (``system`` omitted when there is none).

    System messages anywhere in the history go to the top-level ``system``; tool messages become user
    turns of ``tool_result`` blocks; opaque blocks of other formats are skipped, or raise
    ``interop-block-unsupported`` if ``strict``.
    """
    system_parts: list[dict[str, Any]] = []
    system_as_parts = False
    out: list[dict[str, Any]] = []
    for message in messages:
        fields = fields_of(message, ANTHROPIC)
        as_parts = bool(fields.pop(PARTS_MARK, False))
        kept = fields.pop(_RESULT_CONTENT, {})
        kept = kept if isinstance(kept, Mapping) else {}
        call_fields = fields.pop(_CALL_FIELDS, {})
        call_fields = call_fields if isinstance(call_fields, Mapping) else {}
        parts = [
            p
            for b in message.blocks
            if not is_fields(b, ANTHROPIC) and (p := _part(b, strict, kept, call_fields)) is not None
        ]
        if not parts and not as_parts:
            continue  # nothing this format can carry (another format's items only): never an empty turn
        if message.role == "system":
            system_parts.extend(parts)
            system_as_parts = system_as_parts or as_parts
            continue
        role = "assistant" if message.role == "assistant" else "user"
        is_results = message.role == "tool"
        previous = out[-1] if out else None
        if previous is not None and previous["role"] == role:
            # Anthropic turns alternate: a message of the same role as the one before joins it (a user
            # turn after tool results, parallel results, a second assistant turn), never dropped.
            previous_content = previous["content"]
            if isinstance(previous_content, str):
                previous_content = [{"type": "text", "text": previous_content}]
            if is_results:  # results go first in a user turn, after any results already there
                lead = 0
                while lead < len(previous_content) and previous_content[lead].get("type") == "tool_result":
                    lead += 1
                previous["content"] = [*previous_content[:lead], *parts, *previous_content[lead:]]
            else:
                previous["content"] = previous_content + parts
            previous.update(fields)
        else:
            simple = not as_parts and len(parts) == 1 and parts[0].get("type") == "text" and not is_results
            entry: dict[str, Any] = {"role": role, "content": parts[0]["text"] if simple else parts}
            entry.update(fields)
            out.append(entry)
    payload: dict[str, Any] = {}
    if system_parts:
        # An opaque part kept from the input may have no "type" at all.
        texts_only = all(p.get("type") == "text" for p in system_parts)
        if texts_only and not system_as_parts:
            payload["system"] = "\n\n".join(p["text"] for p in system_parts)
        else:
            payload["system"] = system_parts
    payload["messages"] = out
    return cast("AnthropicPayload", payload)  # plain dicts of exactly those shapes
