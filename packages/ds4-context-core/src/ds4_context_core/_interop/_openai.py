"""OpenAI Chat Completions messages and Responses input items <-> canonical messages (plain dicts)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, cast

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
    ARGUMENTS_TEXT_MARK,
    CUSTOM_CALLS_MARK,
    PARTS_MARK,
    RAW_ARGUMENTS_KEY,
    MessageFactory,
    arguments_from_text,
    arguments_to_text,
    content_blocks,
    data_url,
    fail,
    fields_of,
    is_fields,
    opaque,
    original_arguments_text,
    own_opaque,
    parse_data_url,
    plain_items,
    reference_text,
    require_mapping,
    require_str,
    shape,
)

if TYPE_CHECKING:  # the SDKs' own request types, so SDK calls type-check without a cast; never imported
    from openai.types.chat import ChatCompletionMessageParam
    from openai.types.responses import ResponseInputItemParam

__all__ = ["from_openai_chat", "from_openai_responses", "to_openai_chat", "to_openai_responses"]

CHAT: Final = "openai-chat"
RESPONSES: Final = "openai-responses"
# Chat and Responses results have no error flag: a failed result's text starts with this instead.
ERROR_PREFIX: Final = "Error: "


# ---------------------------------------------------------------- Chat Completions


def _chat_part(part: Mapping[str, Any], path: str) -> CanonicalBlock:
    """One part of a list-of-parts content value; a part we do not model is kept whole as opaque."""
    kind = part.get("type")
    if kind == "text" and shape(part) == {"type", "text"}:
        return TextBlock(text=require_str(part["text"], f"{path}.text", "interop-content-invalid"))
    image = part.get("image_url")
    if kind == "image_url" and shape(part) == {"type", "image_url"} and isinstance(image, Mapping):
        parsed = parse_data_url(image.get("url"))
        if parsed is not None and shape(image) == {"url"}:
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


def _chat_call(call: Mapping[str, Any], path: str) -> tuple[ToolCallBlock, str | None, bool] | None:
    """A function or custom tool call, its original argument text (when we would write another) and
    whether it was custom; None for a call type we do not model (kept whole)."""
    kind = call.get("type") or "function"
    body = call.get(kind) if kind in ("function", "custom") else None
    if not isinstance(body, Mapping):
        return None
    call_id = require_str(call.get("id"), f"{path}.id", "interop-tool-call-invalid")
    name = require_str(body.get("name"), f"{path}.{kind}.name", "interop-tool-call-invalid")
    if kind == "custom":
        text = require_str(body.get("input", ""), f"{path}.custom.input", "interop-tool-call-invalid")
        return ToolCallBlock(id=call_id, name=name, arguments={RAW_ARGUMENTS_KEY: text}), None, True
    text = body.get("arguments", "{}")
    arguments = arguments_from_text(text, f"{path}.function.arguments")
    return (
        ToolCallBlock(id=call_id, name=name, arguments=arguments),
        original_arguments_text(text, arguments),
        False,
    )


def read_chat_message(factory: MessageFactory, raw: Any, path: str) -> None:
    """Add one plain Chat Completions message to ``factory``."""
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
        texts: dict[str, str] = {}
        custom: list[str] = []
        for number, raw_call in enumerate(calls):
            call_path = f"{path}.tool_calls[{number}]"
            call = _chat_call(require_mapping(raw_call, call_path, "interop-tool-call-invalid"), call_path)
            if call is None:
                blocks.append(opaque(CHAT, {"type": "tool_call", "call": dict(raw_call)}))
                continue
            block, text, is_custom = call
            blocks.append(block)
            if text is not None:
                texts[block.id] = text
            if is_custom:
                custom.append(block.id)
        fields = {k: v for k, v in message.items() if k not in ("role", "content", "tool_calls")}
        if as_parts:
            fields[PARTS_MARK] = True
        if texts:
            fields[ARGUMENTS_TEXT_MARK] = texts
        if custom:
            fields[CUSTOM_CALLS_MARK] = custom
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


def from_openai_chat(
    messages: Iterable[Mapping[str, Any]],
    *,
    session_id: str,
    runtime_id: str | None = "interop",
    entry_prefix: str = "",
) -> tuple[CanonicalMessage, ...]:
    """Chat Completions ``messages`` (dicts or SDK objects such as ``ChatCompletionMessage``) to canonical
    messages; ``tool`` messages link to their calls, function and custom tool calls alike."""
    factory = MessageFactory(
        fmt=CHAT, session_id=session_id, runtime_id=runtime_id, entry_prefix=entry_prefix
    )
    for index, raw in enumerate(plain_items(messages)):
        read_chat_message(factory, raw, f"$[{index}]")
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


def _as_parts(content: Any) -> list[Any]:
    if content is None or content == "":
        return []
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def _joined_assistant(out: list[dict[str, Any]], entry: dict[str, Any]) -> bool:
    """Whether assistant ``entry`` joined the message before it (its calls and content appended, texts
    as parts, each kept exactly). Chat wants the tool messages right after the message that made the
    calls: a second assistant turn before them (one result message answers both) joins the first."""
    previous = out[-1] if out else None
    if previous is None or previous["role"] != "assistant" or not previous.get("tool_calls"):
        return False
    previous["tool_calls"] = [*previous["tool_calls"], *entry.pop("tool_calls", [])]
    before, after = previous.get("content"), entry.pop("content", None)
    if after is not None and after != "":
        previous["content"] = (
            after if before is None or before == "" else [*_as_parts(before), *_as_parts(after)]
        )
    entry.pop("role")
    previous.update(entry)
    return True


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _ids(value: Any) -> frozenset[str]:
    return (
        frozenset(item for item in value if isinstance(item, str)) if isinstance(value, list) else frozenset()
    )


def error_text(result: ToolResultBlock) -> str:
    """A failed result's text for formats without an error flag: the model still reads that it failed."""
    if not result.is_error or result.content.startswith(ERROR_PREFIX):
        return result.content
    return ERROR_PREFIX + result.content


def to_openai_chat(
    messages: Iterable[CanonicalMessage], *, strict: bool = False
) -> list[ChatCompletionMessageParam]:
    """Canonical messages to Chat Completions ``messages``. Thinking is not sent (Chat has no place for
    it); opaque blocks of other formats are skipped, or raise ``interop-block-unsupported`` if ``strict``.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        fields = fields_of(message, CHAT)
        as_parts = bool(fields.pop(PARTS_MARK, False))
        texts = _mapping(fields.pop(ARGUMENTS_TEXT_MARK, None))
        custom = _ids(fields.pop(CUSTOM_CALLS_MARK, None))
        blocks = [block for block in message.blocks if not is_fields(block, CHAT)]
        results = [block for block in blocks if type(block) is ToolResultBlock]
        rest = [block for block in blocks if type(block) not in (ToolResultBlock, ThinkingBlock)]
        for result in results:
            entry: dict[str, Any] = {
                "role": "tool",
                "tool_call_id": result.tool_call_id,
                "content": error_text(result),
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
                    text = arguments_to_text(block.arguments, texts.get(block.id))
                    if block.id in custom:
                        body = {"name": block.name, "input": text}
                        tool_calls.append({"id": block.id, "type": "custom", "custom": body})
                    else:
                        function = {"name": block.name, "arguments": text}
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
            if not (content or as_parts or has_text or tool_calls):
                continue  # only thinking or another format's items: Chat has no place for them
            entry = {"role": "assistant", "content": content if (content or as_parts or has_text) else None}
            if tool_calls:
                entry["tool_calls"] = tool_calls
            if _joined_assistant(out, entry):
                continue
        else:
            role = "developer" if message.provenance.original_role == "developer" else message.role
            entry = {
                "role": "system" if role == "system" else ("developer" if role == "developer" else "user")
            }
            entry["content"] = _chat_content(rest, as_parts, strict)
            if not (entry["content"] or as_parts or any(type(block) is TextBlock for block in rest)):
                continue  # nothing this format can carry (another format's items only)
        entry.update(fields)
        out.append(entry)
    return cast("list[ChatCompletionMessageParam]", out)  # plain dicts of exactly those shapes


# ---------------------------------------------------------------- Responses input items

_ASSISTANT_ITEMS: Final = ("reasoning",)


def _responses_part(part: Mapping[str, Any], path: str) -> CanonicalBlock:
    kind = part.get("type")
    if kind == "input_text" and shape(part) == {"type", "text"}:
        return TextBlock(text=require_str(part["text"], f"{path}.text", "interop-content-invalid"))
    if (
        kind == "output_text"
        and shape(part) <= {"type", "text", "annotations"}
        and not part.get("annotations")
    ):
        return TextBlock(text=require_str(part["text"], f"{path}.text", "interop-content-invalid"))
    if kind == "input_image" and shape(part) == {"type", "image_url", "detail"} and part["detail"] == "auto":
        parsed = parse_data_url(part["image_url"])
        if parsed is not None:
            return ImageBlock(mime_type=parsed[0], data=parsed[1])
    return opaque(RESPONSES, part)


def _responses_call(
    item: Mapping[str, Any], path: str, *, custom: bool
) -> tuple[ToolCallBlock, dict[str, Any]]:
    """A ``function_call`` or ``custom_tool_call`` item and the keys to keep for writing it back."""
    key = "input" if custom else "arguments"
    text = item.get(key, "" if custom else "{}")
    if custom:
        arguments = {RAW_ARGUMENTS_KEY: require_str(text, f"{path}.input", "interop-tool-call-invalid")}
    else:
        arguments = arguments_from_text(text, f"{path}.arguments")
    call = ToolCallBlock(
        id=require_str(item.get("call_id"), f"{path}.call_id", "interop-tool-call-invalid"),
        name=require_str(item.get("name"), f"{path}.name", "interop-tool-call-invalid"),
        arguments=arguments,
    )
    call_fields = {k: v for k, v in item.items() if k not in ("type", "call_id", "name", key)}
    if custom:
        call_fields[CUSTOM_CALLS_MARK] = True
    elif (original := original_arguments_text(text, arguments)) is not None:
        call_fields[ARGUMENTS_TEXT_MARK] = original
    return call, call_fields


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

    for index, raw in enumerate(plain_items(items)):
        path = f"$[{index}]"
        item = require_mapping(raw, path)
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind in ("function_call", "custom_tool_call"):
            call, call_fields = _responses_call(item, path, custom=kind == "custom_tool_call")
            pending_calls.append(call)
            pending_fields.append(call_fields)
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
        elif kind in ("function_call_output", "custom_tool_call_output"):
            call_id = require_str(item.get("call_id"), f"{path}.call_id", "interop-tool-result-invalid")
            output = item.get("output")
            if not isinstance(output, str | list):
                raise fail(
                    "interop-tool-result-invalid", "output must be a string or a list", f"{path}.output"
                )
            fields = {k: v for k, v in item.items() if k not in ("type", "call_id", "output")}
            if kind == "custom_tool_call_output":
                fields[CUSTOM_CALLS_MARK] = True
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
) -> list[ResponseInputItemParam]:
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
        # An item kept whole (reasoning, web_search_call, ...) has no fields block; a message item always
        # has one (its list of parts, or its type), even when its only part is kept opaque.
        if (
            len(blocks) == 1
            and len(message.blocks) == 1
            and whole_items[0] is not None
            and "role" not in whole_items[0]
            and message.role != "user"
        ):
            out.append(whole_items[0])
            continue
        results = [block for block in blocks if type(block) is ToolResultBlock]
        calls = [block for block in blocks if type(block) is ToolCallBlock]
        rest = [
            block for block in blocks if type(block) not in (ToolResultBlock, ToolCallBlock, ThinkingBlock)
        ]
        custom_output = bool(fields.pop(CUSTOM_CALLS_MARK, False))
        for result in results:
            item: dict[str, Any] = {
                "type": "custom_tool_call_output" if custom_output else "function_call_output",
                "call_id": result.tool_call_id,
                "output": error_text(result),
            }
            if len(results) == 1:
                item.update(fields)
            out.append(item)
        if message.role == "tool" or (results and not rest and not calls):
            continue
        role = "developer" if message.provenance.original_role == "developer" else message.role
        role = role if role in ("user", "system", "developer", "assistant") else "user"
        content = _responses_content(rest, role == "assistant", as_parts, strict)
        has_text = any(type(block) is TextBlock for block in rest)
        if not (content or as_parts or has_text or calls):
            continue  # nothing this format can carry (thinking, another format's items only)
        if content or as_parts or not calls or has_text:
            entry: dict[str, Any] = {"role": role, "content": content}
            entry.update({k: v for k, v in fields.items() if k != "callFields"})
            out.append(entry)
        stored = fields.get("callFields")
        call_fields: list[Any] = stored if isinstance(stored, list) else []
        for number, call in enumerate(calls):
            stored_call = call_fields[number] if number < len(call_fields) else None
            extra = dict(stored_call) if isinstance(stored_call, Mapping) else {}
            text = arguments_to_text(call.arguments, extra.pop(ARGUMENTS_TEXT_MARK, None))
            if extra.pop(CUSTOM_CALLS_MARK, False):
                item = {"type": "custom_tool_call", "call_id": call.id, "name": call.name, "input": text}
            else:
                item = {"type": "function_call", "call_id": call.id, "name": call.name, "arguments": text}
            item.update(extra)
            out.append(item)
    return cast("list[ResponseInputItemParam]", out)  # plain dicts of exactly those shapes
