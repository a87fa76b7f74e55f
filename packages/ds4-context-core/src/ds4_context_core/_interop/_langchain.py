"""LangChain messages <-> canonical messages, and planning a LangChain history in one call.

LangChain is imported on first use (``pip install "ds4-context-core[langchain]"``); without it each
function raises :class:`MissingExtraError` naming the extra. The conversion goes through LangChain's own
OpenAI Chat converters, so every content shape LangChain knows crosses, and adds what those drop: a
``ToolMessage`` with ``status="error"`` stays an error result, and back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import msgspec

from ds4_context_core._history._model import (
    CanonicalMessage,
    ModelDescriptor,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)

from ._common import MessageFactory, plain_value
from ._framework import plan_framework_history
from ._openai import CHAT, read_chat_message, to_openai_chat
from ._optional import optional_module

__all__ = [
    "LangChainPlan",
    "from_langchain",
    "plan_langchain",
    "planning_middleware",
    "to_langchain",
    "trim_langchain",
]


def _messages_module() -> ModuleType:
    return optional_module("langchain_core.messages", extra="langchain", package="langchain_core")


def from_langchain(messages: Iterable[Any], *, session_id: str = "langchain") -> tuple[CanonicalMessage, ...]:
    """LangChain ``BaseMessage`` objects (or what ``convert_to_messages`` accepts) to canonical messages.

    The n-th canonical message is the n-th LangChain message; tool calls keep their ids and pair with
    their ``ToolMessage`` results.
    """
    return _from_langchain(_messages_module(), _as_base_messages(messages), session_id)


def _as_base_messages(messages: Iterable[Any]) -> list[Any]:
    lc = _messages_module()
    listed = list(messages)
    if all(isinstance(message, lc.BaseMessage) for message in listed):
        return listed
    return list(lc.convert_to_messages(listed))


def _from_langchain(lc: ModuleType, messages: list[Any], session_id: str) -> tuple[CanonicalMessage, ...]:
    factory = MessageFactory(fmt=CHAT, session_id=session_id, runtime_id="interop", entry_prefix="")
    for index, message in enumerate(messages):
        if not _read_simple(factory, message):
            # Parts, names, provider kwargs: LangChain's own converter knows every shape it makes.
            (chat,) = lc.convert_to_openai_messages([message])
            read_chat_message(factory, plain_value(chat), f"$[{index}]")
            if message.type == "tool" and getattr(message, "status", None) == "error":
                factory.messages[-1] = _with_errors(factory.messages[-1])
    return tuple(factory.messages)


def _read_simple(factory: MessageFactory, message: Any) -> bool:
    """Add a message of plain text (and tool calls) directly; False for any other shape."""
    content = message.content
    if not isinstance(content, str) or message.additional_kwargs or getattr(message, "name", None):
        return False
    kind = message.type
    if kind in ("human", "system"):
        factory.add("user" if kind == "human" else "system", [TextBlock(text=content)])
    elif kind == "ai":
        if message.invalid_tool_calls:
            return False
        calls = [
            ToolCallBlock(id=call["id"], name=call["name"], arguments=dict(call["args"]))
            for call in message.tool_calls
        ]
        if any(not call.id for call in calls):
            return False
        factory.add("assistant", [TextBlock(text=content), *calls] if calls else [TextBlock(text=content)])
    elif kind == "tool":
        result = ToolResultBlock(
            tool_call_id=message.tool_call_id,
            tool_name=factory.tool_name(message.tool_call_id),
            content=content,
            is_error=message.status == "error",
        )
        factory.add("tool", [result])
    else:
        return False
    return True


def _with_errors(message: CanonicalMessage) -> CanonicalMessage:
    blocks = tuple(
        msgspec.structs.replace(block, is_error=True) if type(block) is ToolResultBlock else block
        for block in message.blocks
    )
    return msgspec.structs.replace(message, blocks=blocks)


def to_langchain(messages: Iterable[CanonicalMessage]) -> list[Any]:
    """Canonical messages to LangChain ``BaseMessage`` objects (an error result is a ``ToolMessage``
    with ``status="error"``)."""
    lc = _messages_module()
    out: list[Any] = []
    for message in messages:
        errors = {
            block.tool_call_id
            for block in message.blocks
            if type(block) is ToolResultBlock and block.is_error
        }
        for converted in lc.convert_to_messages(to_openai_chat([message])):
            if errors and getattr(converted, "tool_call_id", None) in errors:
                converted.status = "error"
            out.append(converted)
    return out


@dataclass(frozen=True, slots=True)
class LangChainPlan:
    """What :func:`plan_langchain` planned: the LangChain messages to send and the plan behind them."""

    messages: list[Any]
    plan: Any  # a ds4_context_core.planner.ContextPlan (typed loosely: the planner loads lazily)


def plan_langchain(
    messages: Sequence[Any],
    *,
    model: ModelDescriptor,
    fixed_tokens: int = 0,
    config: Mapping[str, Any] | None = None,
    state: Any = None,
    session_id: str = "langchain",
) -> LangChainPlan:
    """Plan a LangChain history for one model call.

    Leading system messages are always kept, in front, and counted against the budget; every message the
    plan keeps unchanged is the caller's own object (ids, metadata and all); trimmed results and receipts
    are new messages. A fallback plan (``plan.ok`` false) is returned as the planner gives it.
    """
    lc = _messages_module()
    originals = _as_base_messages(messages)
    lead = 0
    while lead < len(originals) and getattr(originals[lead], "type", None) == "system":
        lead += 1
    history = _from_langchain(lc, originals, session_id)
    planned = plan_framework_history(
        history,
        range(len(history)),
        lead=lead,
        model=model,
        fixed_tokens=fixed_tokens,
        config=config,
        state=state,
    )
    out: list[Any] = []
    for entry in planned.sequence:
        if isinstance(entry, int):
            out.append(originals[entry])
        else:
            out.extend(to_langchain([entry]))
    return LangChainPlan(messages=out, plan=planned.plan)


def trim_langchain(messages: Sequence[Any], *, model: ModelDescriptor, fixed_tokens: int = 0) -> list[Any]:
    """The LangChain messages to send for ``model``: :func:`plan_langchain` without the plan."""
    return plan_langchain(messages, model=model, fixed_tokens=fixed_tokens).messages


def planning_middleware(
    *, model: ModelDescriptor, fixed_tokens: int = 0, config: Mapping[str, Any] | None = None
) -> Any:
    """A LangChain v1 agent middleware that plans the messages of every model call:
    ``create_agent(model, tools, middleware=[planning_middleware(model=...)])``.

    The agent's system message and ``fixed_tokens`` (the tool schemas) are counted against the budget;
    the plan state is carried from call to call, so decisions stay put and the prompt cache keeps its
    prefix. A fallback plan leaves the request as the agent made it. Needs
    ``pip install "ds4-context-core[langchain-agents]"``.
    """
    middleware = optional_module("langchain.agents.middleware", extra="langchain-agents", package="langchain")
    from ds4_context_core.tokens import estimate_text_tokens  # noqa: PLC0415

    carried: dict[str, Any] = {}

    def planned(request: Any) -> Any:
        system = getattr(request, "system_message", None)
        system_text = (
            system.text if system is not None and isinstance(getattr(system, "text", None), str) else ""
        )
        result = plan_langchain(
            request.messages,
            model=model,
            fixed_tokens=fixed_tokens + estimate_text_tokens(system_text),
            config=config,
            state=carried.get("state"),
        )
        carried["state"] = result.plan.state
        return request.override(messages=result.messages) if result.plan.ok else request

    def wrap_model_call(self: Any, request: Any, handler: Any) -> Any:
        return handler(planned(request))

    async def awrap_model_call(self: Any, request: Any, handler: Any) -> Any:
        return await handler(planned(request))

    # Made here, not at import: the class derives from LangChain's, which is optional.
    kind = type(
        "Ds4ContextPlanningMiddleware",
        (middleware.AgentMiddleware,),
        {"wrap_model_call": wrap_model_call, "awrap_model_call": awrap_model_call, "__module__": __name__},
    )
    return kind()
