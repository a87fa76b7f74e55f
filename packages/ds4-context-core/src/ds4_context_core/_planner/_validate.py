"""The self-check stage: every plan checks itself before it is returned (see ``_engine``)."""

from __future__ import annotations

from collections.abc import Sequence

from ds4_context_core._history._model import CanonicalMessage, ToolCallBlock, ToolResultBlock


def atomicity_problem(messages: Sequence[CanonicalMessage]) -> str | None:
    """``None`` when every result follows its call and every call has a result; else a short reason.

    Also rejects a message id used twice, since restore and receipts address messages by id.
    """
    seen_ids: set[str] = set()
    calls: set[str] = set()
    answered: set[str] = set()
    for message in messages:
        if message.id in seen_ids:
            return "duplicate message id in plan"
        seen_ids.add(message.id)
        for block in message.blocks:
            kind = type(block)
            if kind is ToolCallBlock:
                call_id = block.id  # type: ignore[union-attr]
                if call_id in calls:
                    return "tool call id used twice in plan"
                calls.add(call_id)
            elif kind is ToolResultBlock:
                call_id = block.tool_call_id  # type: ignore[union-attr]
                if call_id not in calls:
                    return "tool result without an earlier call"
                answered.add(call_id)
    if answered != calls:
        return "tool call without a result"
    return None
