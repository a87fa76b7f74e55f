"""Planning a framework's own message objects: what every integration shares.

A framework message becomes one or more canonical messages (``sources[i]`` is the index of the
framework message canonical message ``i`` came from). After planning, each framework message whose
canonical messages are all in the plan, unchanged and side by side, is sent as the caller's own object;
everything else (trimmed results, receipts, a message the plan kept only part of) is a new canonical
message for the integration to convert.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ds4_context_core._history._model import CanonicalMessage, ModelDescriptor

__all__ = ["FrameworkPlan", "plan_framework_history"]

# Plan items that are the history's own message, unchanged.
_UNCHANGED_KINDS = frozenset({"message", "current-request", "pin"})


@dataclass(frozen=True, slots=True)
class FrameworkPlan:
    """``sequence`` in send order: an ``int`` is a caller's message to send as it is, by index."""

    plan: Any  # a ds4_context_core.planner.ContextPlan (the planner loads lazily)
    sequence: list[int | CanonicalMessage]


def plan_framework_history(
    history: Sequence[CanonicalMessage],
    sources: Sequence[int],
    *,
    lead: int,
    model: ModelDescriptor,
    fixed_tokens: int,
    config: Mapping[str, Any] | None,
    state: Any,
) -> FrameworkPlan:
    """Plan ``history[lead:]``; ``history[:lead]`` (the system prompt) is always sent first and counted."""
    from ds4_context_core.planner import plan_context  # noqa: PLC0415 - the planner loads pydantic
    from ds4_context_core.tokens import estimate_message_tokens  # noqa: PLC0415

    system_tokens = sum(estimate_message_tokens(message) for message in history[:lead])
    rest = history[lead:]
    plan = plan_context(
        rest, model=model, fixed_tokens=fixed_tokens + system_tokens, config=config, state=state
    )
    # (source index or None when changed, the canonical message), in send order.
    entries: list[tuple[int | None, CanonicalMessage]] = [(sources[i], history[i]) for i in range(lead)]
    for item, planned in zip(plan.items, plan.messages, strict=True):
        index = item.original_index
        unchanged = item.kind in _UNCHANGED_KINDS and index is not None and rest[index] == planned
        entries.append((sources[lead + index] if unchanged and index is not None else None, planned))
    return FrameworkPlan(plan=plan, sequence=_collapse(entries, Counter(sources)))


def _collapse(
    entries: list[tuple[int | None, CanonicalMessage]], per_source: Counter[int]
) -> list[int | CanonicalMessage]:
    out: list[int | CanonicalMessage] = []
    start = 0
    while start < len(entries):
        source = entries[start][0]
        end = start + 1
        while source is not None and end < len(entries) and entries[end][0] == source:
            end += 1
        if source is not None and end - start == per_source[source]:
            out.append(source)
        else:
            out.extend(message for _, message in entries[start:end])
        start = end
    return out
