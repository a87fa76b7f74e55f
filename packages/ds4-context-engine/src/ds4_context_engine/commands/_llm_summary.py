"""LLM summaries of what a workspace's plan cuts: one provider call per new span, cached by span hash.

:func:`summarize_cut` takes the messages the current plan leaves out that no accepted summary covers
yet, and asks core's :func:`~ds4_context_core.summaries.summarize` for their ``summary-contract-v1``
summary through any transport's ``complete`` (``OpenAIChatTransport``, ``OpenAIResponsesTransport``,
``AnthropicTransport`` or a runtime adapter). The outcome is cached in the derived store (or, without
one, in the workspace) by the span's hash, so a span costs one call; accepted summaries are then given
to the planner as ``summary`` supplements on every later plan whose cut holds their span. A rejected
summary is cached with its code only, and a failed call (fallback, error, timeout) is not cached at all:
in both cases the plan keeps its receipts and task digest, and the turn is never blocked.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ds4_context_core import CanonicalMessage, ModelDescriptor
from ds4_context_core.planner import SupplementalItem
from ds4_context_core.summaries import (
    SUMMARY_CONTRACT_VERSION,
    SUMMARY_DEFAULT_MAX_CHARS,
    SummaryOutcome,
    summarize,
    summary_span_hash,
    summary_supplement,
)
from ds4_context_engine._exceptions import CommandError, DerivedStoreError
from ds4_context_engine.commands._digest import cut_messages
from ds4_context_engine.store import StoredSummary

if TYPE_CHECKING:
    from ds4_context_core.adapter import CompletionRequest
    from ds4_context_engine.commands._workspace import ContextWorkspace

# what the commands package exports (tests/test_lazy_exports.py); the workspace imports the rest by name
__all__ = ["SUMMARY_TIMEOUT_S", "summarize_cut"]

SUMMARY_TIMEOUT_S = 60.0


def summary_supplements(records: Sequence[StoredSummary]) -> tuple[SupplementalItem, ...]:
    """The accepted records as planner supplements (byte-identical for the same record)."""
    items: list[SupplementalItem] = []
    for record in records:
        if record.status != "accepted" or record.text is None:
            continue
        item = summary_supplement(_outcome(record))
        if item is not None:
            items.append(item)
    return tuple(items)


def _outcome(record: StoredSummary) -> SummaryOutcome:
    return SummaryOutcome(
        contract_version=record.contract_version,
        span_hash=record.span_hash,
        status=record.status,
        code=record.code,
        source_ids=record.source_ids,
        text=record.text,
    )


def uncovered_span(
    messages: Sequence[CanonicalMessage], cut: int, records: Sequence[StoredSummary]
) -> Sequence[CanonicalMessage]:
    """The cut messages after the last one an accepted summary (all of whose sources are cut) covers."""
    positions = {message.id: index for index, message in enumerate(messages[:cut])}
    covered_to = 0
    for record in records:
        if record.status != "accepted" or not record.source_ids:
            continue
        at = [positions.get(source) for source in record.source_ids]
        if all(position is not None for position in at):
            covered_to = max(covered_to, max(p for p in at if p is not None) + 1)
    return messages[covered_to:cut]


async def summarize_cut(
    workspace: ContextWorkspace,
    complete: Callable[[CompletionRequest], Awaitable[Any]],
    *,
    model: ModelDescriptor | None = None,
    timeout_s: float = SUMMARY_TIMEOUT_S,
    max_chars: int = SUMMARY_DEFAULT_MAX_CHARS,
) -> SummaryOutcome | None:
    """Summarise the part of the current plan's cut that no accepted summary covers; ``None`` if none.

    ``model`` is the summariser's (default: the workspace's model). A span already summarised (accepted
    or rejected) is answered from the cache without a call. Never raises for what the transport does.
    """
    descriptor = model or workspace.model
    if descriptor is None:
        raise CommandError("model-unknown", "no model to summarise with; pass model=")
    plan = workspace.plan()
    messages = workspace.context.messages
    records = workspace.stored_summaries()
    span = uncovered_span(messages, len(cut_messages(messages, plan)), records)
    if not span:
        return None
    span_hash = summary_span_hash(span)
    cached = next((record for record in records if record.span_hash == span_hash), None)
    if cached is not None:
        return _outcome(cached)
    outcome = await summarize(span, complete, model=descriptor, timeout_s=timeout_s, max_chars=max_chars)
    if outcome.status == "failed":
        return outcome  # a transport problem: try again at a later turn
    record = StoredSummary(
        session_id=workspace.session.session_id,
        span_hash=outcome.span_hash,
        contract_version=SUMMARY_CONTRACT_VERSION,
        status="accepted" if outcome.status == "accepted" else "rejected",
        code=outcome.code,
        text=outcome.text,
        source_ids=outcome.source_ids,
        created_at=datetime.now(UTC).isoformat(timespec="milliseconds"),
    )
    with contextlib.suppress(DerivedStoreError):  # the store is disposable: the summary is lost, not the turn
        workspace.remember_summary(record)
    return outcome
