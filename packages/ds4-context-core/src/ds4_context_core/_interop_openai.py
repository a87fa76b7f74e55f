"""OpenAI Chat Completions messages and Responses input items <-> canonical messages (plain dicts)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from ._interop_common import (
    PARTS_MARK,
    MessageFactory,
    arguments_from_text,
    arguments_to_text,
    content_blocks,
    data_url,
    fail,
    fields_of,
    is_fields,
    opaque,
    own_opaque,
    parse_data_url,
    reference_text,
    require_items,
    require_mapping,
    require_str,
)
from ._model import (
    CanonicalBlock,
    CanonicalMessage,
    ImageBlock,
    OpaqueProviderBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
)

__all__ = ["from_openai_chat", "from_openai_responses", "to_openai_chat", "to_openai_responses"]

CHAT: Final = "openai-chat"
RESPONSES: Final = "openai-responses"


# ---------------------------------------------------------------- Chat Completions


def _chat_part(part: Mapping[str, Any], path: str) -> CanonicalBlock:
    """One part of a list-of-parts content value; a part we do not model is kept whole as opaque."""
    kind = part.get("type")
    if kind == "text" and set(part) == {"type", "text"}:
        return TextBlock(text=require_str(part["text"], f"{path}.text", "interop-content-invalid"))
    image = part.get("image_url")
    if kind == "image_url" and set(part) == {"type", "image_url"} and isinstance(image, Mapping):
        parsed = parse_data_url(image.get("url"))
        if parsed is not None and set(image) == {"url"}:
            return ImageBlock(mime_type=parsed[0], data=parsed[1])
    return opaque(CHAT, part)


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part["text"]
            for part in content
            if isinstance(part, Mapping) and part.get("type") == "text" and isinstance(part.get("text"), str)
        )
    return ""


def from_openai_chat(
    messages: Iterable[Mapping[str, Any]],
    *,
    session_id: str,
    runtime_id: str | None = "interop",
    entry_prefix: str = "",
) -> tuple[CanonicalMessage, ...]:
    """Chat Completions ``messages`` (dicts) to canonical messages; ``tool`` messages link to their calls."""
    factory = MessageFactory(
        fmt=CHAT, session_id=session_id, runtime_id=runtime_id, entry_prefix=entry_prefix
    )
    for index, raw in enumerate(require_items(messages, "messages")):
        path = f"$[{index}]"
        message = require_mapping(raw, path)
        role = message.get("role")
        if role in ("system", "developer", "user"):
            blocks, as_parts = content_blocks(message.get("content"), f"{path}.content", _chat_part)
            fields = {k: v for k, v in message.items() if k not in ("role", "content")}
            if as_parts:
                fields[PARTS_MARK] = True
            factory.add(
                "user" if role == "user" else "system",
                blocks,
                fields=fields,
                original_role="developer" if role == "developer" else None,
            )
        elif role == "assistant":
            content = message.get("content")
            blocks, as_parts = (
                ([], False) if content is None else content_blocks(content, f"{path}.content", _chat_part)
            )
            calls = message.get("tool_calls") or []
            if not isinstance(calls, list):
                raise fail("interop-tool-call-invalid", "tool_calls must be a list", f"{path}.tool_calls")
            for number, raw_call in enumerate(calls):
                call_path = f"{path}.tool_calls[{number}]"
                call = require_mapping(raw_call, call_path, "interop-tool-call-invalid")
                function = call.get("function")
                if call.get("type", "function") != "function" or not isinstance(function, Mapping):
                    blocks.append(opaque(CHAT, {"type": "tool_call", "call": dict(call)}))
                    continue
                blocks.append(
                    ToolCallBlock(
                        id=require_str(call.get("id"), f"{call_path}.id", "interop-tool-call-invalid"),
                        name=require_str(
                            function.get("name"), f"{call_path}.function.name", "interop-tool-call-invalid"
                        ),
                        arguments=arguments_from_text(
                            function.get("arguments", "{}"), f"{call_path}.function.arguments"
                        ),
                    )
                )
            fields = {k: v for k, v in message.items() if k not in ("role", "content", "tool_calls")}
            if as_parts:
                fields[PARTS_MARK] = True
            factory.add("assistant", blocks, fields=fields)
        elif role == "tool":
            call_id = require_str(
                message.get("tool_call_id"), f"{path}.tool_call_id", "interop-tool-result-invalid"
            )
            content = message.get("content")
            if not isinstance(content, str | list):
                raise fail(
                    "interop-tool-result-invalid", "tool content must be a string or parts", f"{path}.content"
                )
            fields = {k: v for k, v in message.items() if k not in ("role", "content", "tool_call_id")}
            if isinstance(content, list):
                fields["content"] = content  # restored verbatim on export; the block holds its text
            result = ToolResultBlock(
                tool_call_id=call_id, tool_name=factory.tool_name(call_id), content=_text_of(content)
            )
            factory.add("tool", [result], fields=fields)
        else:
            raise fail("interop-role-unknown", "unknown chat message role", f"{path}.role")
    return tuple(factory.messages)


def _skip_or_fail(block: CanonicalBlock, strict: bool, fmt: str) -> None:
    if strict and type(block) is OpaqueProviderBlock:
        raise fail(
            "interop-block-unsupported",
            f"an opaque block from another format cannot be written as {fmt}",
            "$",
        )


def _chat_content(
    blocks: Sequence[CanonicalBlock], as_parts: bool, strict: bool
) -> str | list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for block in blocks:
        kind = type(block)
        if kind is TextBlock:
            parts.append({"type": "text", "text": block.text})  # type: ignore[union-attr]
        elif kind is ImageBlock:
            url = data_url(block.mime_type, block.data)  # type: ignore[union-attr]
            parts.append({"type": "image_url", "image_url": {"url": url}})
        elif (reference := reference_text(block)) is not None:
            parts.append({"type": "text", "text": reference})
        elif (original := own_opaque(block, CHAT)) is not None:
            parts.append(original)
        elif kind is OpaqueProviderBlock:
            _skip_or_fail(block, strict, CHAT)
    if not as_parts and all(part.get("type") == "text" for part in parts):
        return "".join(part["text"] for part in parts)
    return parts


def to_openai_chat(messages: Iterable[CanonicalMessage], *, strict: bool = False) -> list[dict[str, Any]]:
    """Canonical messages to Chat Completions ``messages``. Thinking is not sent (Chat has no place for
    it); opaque blocks of other formats are skipped, or raise ``interop-block-unsupported`` if ``strict``.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        fields = fields_of(message, CHAT)
        as_parts = bool(fields.pop(PARTS_MARK, False))
        blocks = [block for block in message.blocks if not is_fields(block, CHAT)]
        results = [block for block in blocks if type(block) is ToolResultBlock]
        rest = [block for block in blocks if type(block) not in (ToolResultBlock, ThinkingBlock)]
        for result in results:
            entry: dict[str, Any] = {
                "role": "tool",
                "tool_call_id": result.tool_call_id,
                "content": result.content,
            }
            if "content" in fields and len(results) == 1:
                entry["content"] = fields.pop("content")
            out.append(entry)
        if message.role == "tool" or (results and not rest):
            if out and results:
                out[-1].update(fields)
            continue
        if message.role == "assistant":
            tool_calls: list[dict[str, Any]] = []
            others: list[CanonicalBlock] = []
            for block in rest:
                original = own_opaque(block, CHAT)
                if type(block) is ToolCallBlock:
                    function = {"name": block.name, "arguments": arguments_to_text(block.arguments)}
                    tool_calls.append({"id": block.id, "type": "function", "function": function})
                elif (
                    original is not None
                    and original.get("type") == "tool_call"
                    and isinstance(original.get("call"), Mapping)
                ):
                    tool_calls.append(dict(original["call"]))
                else:
                    others.append(block)
            content = _chat_content(others, as_parts, strict)
            # Chat writes "no text" as null; an empty string only when the history had one.
            has_text = any(type(block) is TextBlock for block in others)
            entry = {"role": "assistant", "content": content if (content or as_parts or has_text) else None}
            if tool_calls:
                entry["tool_calls"] = tool_calls
        else:
            role = "developer" if message.provenance.original_role == "developer" else message.role
            entry = {
                "role": "system" if role == "system" else ("developer" if role == "developer" else "user")
            }
            entry["content"] = _chat_content(rest, as_parts, strict)
        entry.update(fields)
        out.append(entry)
    return out


# ---------------------------------------------------------------- Responses input items

_ASSISTANT_ITEMS: Final = ("reasoning",)


def _responses_part(part: Mapping[str, Any], path: str) -> CanonicalBlock:
    kind = part.get("type")
    if kind == "input_text" and set(part) == {"type", "text"}:
        return TextBlock(text=require_str(part["text"], f"{path}.text", "interop-content-invalid"))
    if kind == "output_text" and set(part) <= {"type", "text", "annotations"} and not part.get("annotations"):
        return TextBlock(text=require_str(part["text"], f"{path}.text", "interop-content-invalid"))
    if kind == "input_image" and set(part) == {"type", "image_url", "detail"} and part["detail"] == "auto":
        parsed = parse_data_url(part["image_url"])
        if parsed is not None:
            return ImageBlock(mime_type=parsed[0], data=parsed[1])
    return opaque(RESPONSES, part)


def from_openai_responses(
    items: Iterable[Mapping[str, Any]],
    *,
    session_id: str,
    runtime_id: str | None = "interop",
    entry_prefix: str = "",
) -> tuple[CanonicalMessage, ...]:
    """Responses API input items to canonical messages. Consecutive ``function_call`` items become one
    assistant message (a parallel batch stays one tool atomic group); each ``function_call_output``
    becomes a tool message linked by ``call_id``; other item types are kept whole as opaque blocks.
    """
    factory = MessageFactory(
        fmt=RESPONSES, session_id=session_id, runtime_id=runtime_id, entry_prefix=entry_prefix
    )
    pending_calls: list[CanonicalBlock] = []
    pending_fields: list[dict[str, Any]] = []

    def flush() -> None:
        if pending_calls:
            fields: dict[str, Any] = {}
            if any(pending_fields):
                fields["callFields"] = list(pending_fields)
            factory.add("assistant", list(pending_calls), fields=fields)
            pending_calls.clear()
            pending_fields.clear()

    for index, raw in enumerate(require_items(items, "input items")):
        path = f"$[{index}]"
        item = require_mapping(raw, path)
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "function_call":
            pending_calls.append(
                ToolCallBlock(
                    id=require_str(item.get("call_id"), f"{path}.call_id", "interop-tool-call-invalid"),
                    name=require_str(item.get("name"), f"{path}.name", "interop-tool-call-invalid"),
                    arguments=arguments_from_text(item.get("arguments", "{}"), f"{path}.arguments"),
                )
            )
            pending_fields.append(
                {k: v for k, v in item.items() if k not in ("type", "call_id", "name", "arguments")}
            )
            continue
        flush()
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "system", "developer", "assistant"):
                raise fail("interop-role-unknown", "unknown message role", f"{path}.role")
            blocks, as_parts = content_blocks(item.get("content"), f"{path}.content", _responses_part)
            fields = {k: v for k, v in item.items() if k not in ("role", "content")}
            if as_parts:
                fields[PARTS_MARK] = True
            canonical_role = "user" if role == "user" else ("assistant" if role == "assistant" else "system")
            factory.add(
                canonical_role,  # type: ignore[arg-type]
                blocks,
                fields=fields,
                original_role="developer" if role == "developer" else None,
            )
        elif kind == "function_call_output":
            call_id = require_str(item.get("call_id"), f"{path}.call_id", "interop-tool-result-invalid")
            output = item.get("output")
            if not isinstance(output, str | list):
                raise fail(
                    "interop-tool-result-invalid", "output must be a string or a list", f"{path}.output"
                )
            fields = {k: v for k, v in item.items() if k not in ("type", "call_id", "output")}
            text = output if isinstance(output, str) else _responses_output_text(output)
            if isinstance(output, list):
                fields["output"] = output
            result = ToolResultBlock(tool_call_id=call_id, tool_name=factory.tool_name(call_id), content=text)
            factory.add("tool", [result], fields=fields)
        elif isinstance(kind, str):
            role = (
                "tool"
                if kind.endswith("_output")
                else ("assistant" if kind.endswith("_call") or kind in _ASSISTANT_ITEMS else "custom")
            )
            factory.add(role, [opaque(RESPONSES, item)])  # type: ignore[arg-type]
        else:
            raise fail("interop-message-invalid", "an input item needs a type or a role", path)
    flush()
    return tuple(factory.messages)


def _responses_output_text(output: list[Any]) -> str:
    return "".join(
        part["text"]
        for part in output
        if isinstance(part, Mapping)
        and part.get("type") in ("input_text", "output_text")
        and isinstance(part.get("text"), str)
    )


def _responses_content(
    blocks: Sequence[CanonicalBlock], assistant: bool, as_parts: bool, strict: bool
) -> str | list[dict[str, Any]]:
    text_type = "output_text" if assistant else "input_text"
    parts: list[dict[str, Any]] = []
    for block in blocks:
        kind = type(block)
        if kind is TextBlock:
            part: dict[str, Any] = {"type": text_type, "text": block.text}  # type: ignore[union-attr]
            parts.append(part)
        elif kind is ImageBlock:
            url = data_url(block.mime_type, block.data)  # type: ignore[union-attr]
            parts.append({"type": "input_image", "image_url": url, "detail": "auto"})
        elif (reference := reference_text(block)) is not None:
            parts.append({"type": text_type, "text": reference})
        elif (original := own_opaque(block, RESPONSES)) is not None:
            parts.append(original)
        elif kind is OpaqueProviderBlock:
            _skip_or_fail(block, strict, RESPONSES)
    if not as_parts and all(part["type"] == text_type for part in parts):
        return "".join(part["text"] for part in parts)
    return parts


def to_openai_responses(
    messages: Iterable[CanonicalMessage], *, strict: bool = False
) -> list[dict[str, Any]]:
    """Canonical messages to Responses input items (``message``, ``function_call``, ``function_call_output``
    and the opaque items kept from an earlier conversion). Thinking is not sent; foreign opaque blocks are
    skipped, or raise ``interop-block-unsupported`` if ``strict``.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        fields = fields_of(message, RESPONSES)
        as_parts = bool(fields.pop(PARTS_MARK, False))
        blocks = [block for block in message.blocks if not is_fields(block, RESPONSES)]
        whole_items = [own_opaque(block, RESPONSES) for block in blocks]
        if (
            len(blocks) == 1
            and whole_items[0] is not None
            and "role" not in whole_items[0]
            and message.role != "user"
        ):
            out.append(whole_items[0])  # an item kept whole (reasoning, web_search_call, ...)
            continue
        results = [block for block in blocks if type(block) is ToolResultBlock]
        calls = [block for block in blocks if type(block) is ToolCallBlock]
        rest = [
            block for block in blocks if type(block) not in (ToolResultBlock, ToolCallBlock, ThinkingBlock)
        ]
        for result in results:
            item: dict[str, Any] = {
                "type": "function_call_output",
                "call_id": result.tool_call_id,
                "output": result.content,
            }
            if len(results) == 1:
                item.update(fields)
            out.append(item)
        if message.role == "tool" or (results and not rest and not calls):
            continue
        role = "developer" if message.provenance.original_role == "developer" else message.role
        role = role if role in ("user", "system", "developer", "assistant") else "user"
        content = _responses_content(rest, role == "assistant", as_parts, strict)
        if content or as_parts or not calls or any(type(block) is TextBlock for block in rest):
            entry: dict[str, Any] = {"role": role, "content": content}
            entry.update({k: v for k, v in fields.items() if k != "callFields"})
            out.append(entry)
        stored = fields.get("callFields")
        call_fields: list[Any] = stored if isinstance(stored, list) else []
        for number, call in enumerate(calls):
            item = {
                "type": "function_call",
                "call_id": call.id,
                "name": call.name,
                "arguments": arguments_to_text(call.arguments),
            }
            if number < len(call_fields) and isinstance(call_fields[number], Mapping):
                item.update(call_fields[number])
            out.append(item)
    return out
