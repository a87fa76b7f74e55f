"""The OpenAI Agents SDK: a ``call_model_input_filter`` that plans every model call of a run.

The Agents SDK holds a run's history as Responses input items, which ``from_openai_responses`` reads
(dicts and SDK objects alike). The filter plans them for the model's window: items the plan keeps
unchanged are handed back as the SDK gave them, trimmed results and receipts are new items, the run's
instructions are counted against the budget, and the plan state is carried to the next call so the
prompt cache keeps its prefix. Install with ``pip install "ds4-context-core[openai-agents]"``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

from ds4_context_core._history._model import (
    CanonicalMessage,
    ModelDescriptor,
    OpaqueProviderBlock,
    ToolCallBlock,
)

from ._framework import plan_framework_history
from ._openai import from_openai_responses, to_openai_responses
from ._optional import optional_module

__all__ = ["model_input_filter", "plan_agent_input"]


def _run_module() -> ModuleType:
    return optional_module("agents.run", extra="openai-agents", package="agents")


def _item_spans(history: Sequence[CanonicalMessage]) -> list[range]:
    """The input items each canonical message came from: a batch of calls is one message per batch."""
    spans: list[range] = []
    start = 0
    for message in history:
        blocks = [block for block in message.blocks if type(block) is not OpaqueProviderBlock]
        calls = sum(1 for block in blocks if type(block) is ToolCallBlock)
        width = calls if calls and calls == len(blocks) and message.role == "assistant" else 1
        spans.append(range(start, start + width))
        start += width
    return spans


def _instructions_tokens(instructions: str | None) -> int:
    if not instructions:
        return 0
    from ds4_context_core.tokens import estimate_text_tokens  # noqa: PLC0415

    return estimate_text_tokens(instructions)


def plan_agent_input(
    items: Sequence[Any],
    *,
    model: ModelDescriptor,
    instructions: str | None = None,
    fixed_tokens: int = 0,
    config: Mapping[str, Any] | None = None,
    state: Any = None,
    session_id: str = "openai-agents",
) -> tuple[list[Any], Any]:
    """The Responses input items to send for ``model`` and the plan behind them."""
    listed = list(items)
    history = from_openai_responses(listed, session_id=session_id)
    spans = _item_spans(history)
    planned = plan_framework_history(
        history,
        range(len(history)),
        lead=0,
        model=model,
        fixed_tokens=fixed_tokens + _instructions_tokens(instructions),
        config=config,
        state=state,
    )
    out: list[Any] = []
    for entry in planned.sequence:
        if isinstance(entry, int):
            out.extend(listed[index] for index in spans[entry])
        else:
            out.extend(to_openai_responses([entry]))
    return out, planned.plan


def model_input_filter(
    *, model: ModelDescriptor, fixed_tokens: int = 0, config: Mapping[str, Any] | None = None
) -> Callable[[Any], Any]:
    """``RunConfig(call_model_input_filter=model_input_filter(model=...))``: plan every model call.

    A fallback plan leaves the input as the SDK gave it; ``fixed_tokens`` is for the tool schemas.
    """
    run = _run_module()
    carried: dict[str, Any] = {}

    def apply(data: Any) -> Any:
        given = data.model_data
        planned, plan = plan_agent_input(
            given.input,
            model=model,
            instructions=given.instructions,
            fixed_tokens=fixed_tokens,
            config=config,
            state=carried.get("state"),
        )
        carried["state"] = plan.state
        if not plan.ok:
            return given
        return run.ModelInputData(input=planned, instructions=given.instructions)

    return apply
