"""pydantic-ai messages <-> canonical messages, and a history processor that plans each model request.

pydantic-ai is imported on first use (``pip install "ds4-context-core[pydantic-ai]"``). A
``ModelRequest`` becomes up to three canonical messages, in this order: its system prompt parts, its
tool returns (and tool retry prompts, as error results), its user prompt parts; a ``ModelResponse``
becomes one assistant message. Parts we do not model stay in the caller's own message objects, which the
processor sends as they are whenever the plan keeps them whole.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from types import ModuleType
from typing import Any

from ds4_context_core._history._model import (
    CanonicalBlock,
    CanonicalMessage,
    MessageRole,
    ModelDescriptor,
    OpaqueProviderBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
)

from ._common import MessageFactory
from ._framework import FrameworkPlan, plan_framework_history
from ._optional import optional_module

__all__ = ["from_pydantic_ai", "history_processor", "plan_pydantic_ai", "to_pydantic_ai"]

FORMAT = "pydantic-ai"


def _messages_module() -> ModuleType:
    return optional_module("pydantic_ai.messages", extra="pydantic-ai", package="pydantic_ai")


def _opaque(part: Any) -> OpaqueProviderBlock:
    return OpaqueProviderBlock(original_type=f"{FORMAT}:{getattr(part, 'part_kind', 'part')}", value={})


def _read(messages: Sequence[Any], session_id: str) -> tuple[tuple[CanonicalMessage, ...], list[int]]:
    pa = _messages_module()
    factory = MessageFactory(fmt=FORMAT, session_id=session_id, runtime_id="interop", entry_prefix="")
    sources: list[int] = []

    def add(source: int, role: MessageRole, blocks: list[CanonicalBlock]) -> None:
        if blocks:
            factory.add(role, blocks)
            sources.append(source)

    for index, message in enumerate(messages):
        if isinstance(message, pa.ModelResponse):
            add(index, "assistant", [_response_block(part, pa) for part in message.parts])
            continue
        buckets: dict[MessageRole, list[CanonicalBlock]] = {"system": [], "tool": [], "user": []}
        for part in getattr(message, "parts", ()):
            role, block = _request_block(part, pa)
            buckets[role].append(block)
        system, results, user = buckets["system"], buckets["tool"], buckets["user"]
        add(index, "system", system)
        add(index, "tool", results)
        add(index, "user", user)
    return tuple(factory.messages), sources


# Outcomes of a tool return that tell the model the call did not succeed.
_ERROR_OUTCOMES = frozenset({"failed", "denied", "interrupted", "retried"})


class _Missing:
    """Stands in for a part class this pydantic-ai does not have: nothing is an instance of it."""


def _request_block(part: Any, pa: ModuleType) -> tuple[MessageRole, CanonicalBlock]:
    """Which canonical message a ``ModelRequest`` part goes to, and its block."""
    # RetryPromptPart is deprecated in pydantic-ai 2 (a tool return with outcome "retried" replaces it).
    retry_prompt: type[Any] = getattr(pa, "RetryPromptPart", _Missing)
    retry_feedback: type[Any] = getattr(pa, "RetryFeedbackPart", _Missing)
    if isinstance(part, pa.SystemPromptPart):
        return "system", TextBlock(text=part.content)
    if isinstance(part, pa.ToolReturnPart):
        failed = getattr(part, "outcome", "success") in _ERROR_OUTCOMES
        content = part.model_response_str(wrap_if_error=False) if failed else part.model_response_str()
        return "tool", ToolResultBlock(
            tool_call_id=part.tool_call_id, tool_name=part.tool_name, content=content, is_error=failed
        )
    if isinstance(part, retry_prompt) and part.tool_name is not None:
        return "tool", ToolResultBlock(
            tool_call_id=part.tool_call_id,
            tool_name=part.tool_name,
            content=part.model_response(),
            is_error=True,
        )
    if isinstance(part, pa.UserPromptPart) and isinstance(part.content, str):
        return "user", TextBlock(text=part.content)
    if isinstance(part, retry_prompt | retry_feedback):
        return "user", TextBlock(text=part.model_response())
    return "user", _opaque(part)


def _response_block(part: Any, pa: ModuleType) -> CanonicalBlock:
    if isinstance(part, pa.TextPart):
        return TextBlock(text=part.content)
    if isinstance(part, pa.ToolCallPart):
        return ToolCallBlock(id=part.tool_call_id, name=part.tool_name, arguments=part.args_as_dict())
    if isinstance(part, pa.ThinkingPart) and part.signature is None:
        return ThinkingBlock(thinking=part.content)
    return _opaque(part)


def from_pydantic_ai(
    messages: Iterable[Any], *, session_id: str = "pydantic-ai"
) -> tuple[CanonicalMessage, ...]:
    """pydantic-ai ``ModelRequest``/``ModelResponse`` objects to canonical messages (tool calls pair with
    their returns by ``tool_call_id``; a tool retry prompt is an error result)."""
    return _read(list(messages), session_id)[0]


def to_pydantic_ai(messages: Iterable[CanonicalMessage]) -> list[Any]:
    """Canonical messages to pydantic-ai messages: consecutive system, user and tool messages join one
    ``ModelRequest``, an assistant message is a ``ModelResponse``; another format's parts are left out."""
    pa = _messages_module()
    out: list[Any] = []
    request: list[Any] = []
    for message in messages:
        if message.role == "assistant":
            if request:
                out.append(pa.ModelRequest(parts=request))
                request = []
            parts = [part for block in message.blocks if (part := _response_part(block, pa)) is not None]
            if parts:
                out.append(pa.ModelResponse(parts=parts))
            continue
        for block in message.blocks:
            if type(block) is ToolResultBlock:
                request.append(
                    pa.ToolReturnPart(
                        tool_name=block.tool_name,
                        content=block.content,
                        tool_call_id=block.tool_call_id,
                        outcome="failed" if block.is_error else "success",
                    )
                )
            elif type(block) is TextBlock:
                part = pa.SystemPromptPart if message.role == "system" else pa.UserPromptPart
                request.append(part(content=block.text))
    if request:
        out.append(pa.ModelRequest(parts=request))
    return out


def _response_part(block: CanonicalBlock, pa: ModuleType) -> Any:
    if type(block) is TextBlock:
        return pa.TextPart(content=block.text)
    if type(block) is ToolCallBlock:
        return pa.ToolCallPart(tool_name=block.name, args=dict(block.arguments), tool_call_id=block.id)
    if type(block) is ThinkingBlock:
        return pa.ThinkingPart(content=block.thinking)
    return None


def plan_pydantic_ai(
    messages: Sequence[Any],
    *,
    model: ModelDescriptor,
    fixed_tokens: int = 0,
    config: Mapping[str, Any] | None = None,
    state: Any = None,
    session_id: str = "pydantic-ai",
) -> tuple[list[Any], Any]:
    """The pydantic-ai messages to send for ``model`` and the plan behind them.

    The system prompt parts are always kept and counted; a message the plan keeps whole is the caller's
    own object (every part, modelled or not); the rest is rebuilt from the plan.
    """
    listed = list(messages)
    history, sources = _read(listed, session_id)
    lead = 0
    while lead < len(history) and history[lead].role == "system" and sources[lead] == sources[0]:
        lead += 1
    planned: FrameworkPlan = plan_framework_history(
        history, sources, lead=lead, model=model, fixed_tokens=fixed_tokens, config=config, state=state
    )
    out: list[Any] = []
    pending: list[CanonicalMessage] = []
    for entry in planned.sequence:
        if isinstance(entry, int):
            out.extend(to_pydantic_ai(pending))
            pending = []
            out.append(listed[entry])
        else:
            pending.append(entry)
    out.extend(to_pydantic_ai(pending))
    return out, planned.plan


def history_processor(
    *, model: ModelDescriptor, fixed_tokens: int = 0, config: Mapping[str, Any] | None = None
) -> Callable[[list[Any]], list[Any]]:
    """A pydantic-ai history processor that plans every model request:
    ``Agent(..., capabilities=[ProcessHistory(history_processor(model=...))])``.

    Plans are carried from one request to the next, so decisions stay put and the prompt cache keeps
    its prefix. A fallback plan leaves the history as pydantic-ai gave it.
    """
    carried: dict[str, Any] = {}

    def process(messages: list[Any]) -> list[Any]:
        planned, plan = plan_pydantic_ai(
            messages, model=model, fixed_tokens=fixed_tokens, config=config, state=carried.get("state")
        )
        carried["state"] = plan.state
        return planned if plan.ok else messages

    return process
