"""Retrieved history: older messages the plan left out that match the current request, found with FTS5.

A long session's plan keeps the recent tail and cuts the rest; a fact from two hours ago that the user's
new question is about is then gone. The derived store indexes every entry's text, so the workspace can ask
it for the cut messages that share the request's words and hand the best few back to the planner as
``retrieved-history`` supplements, which it places right before the current request (after the stable
prefix, so prompt caching is not disturbed) within their token ceiling.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Final

from ds4_context_core import (
    CanonicalMessage,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    stable_json,
)
from ds4_context_core.planner import ContextPlan, SupplementalItem
from ds4_context_engine.store import DerivedStore

__all__ = [
    "RETRIEVAL_HITS_DEFAULT",
    "RETRIEVAL_QUERY_TERMS",
    "RETRIEVED_TEXT_MAX_CHARS",
    "retrieval_query_terms",
    "retrieve_history",
]

RETRIEVAL_HITS_DEFAULT: Final = 4
RETRIEVAL_QUERY_TERMS: Final = 12
RETRIEVED_TEXT_MAX_CHARS: Final = 2_000
# How many search hits to read per wanted supplement: most hits are messages the plan still holds.
_HITS_PER_RESULT: Final = 8
_TERM: Final = re.compile(r"[^\W_][\w./-]*[^\W_]|[^\W_]", re.UNICODE)
_MIN_TERM_CHARS: Final = 3
# Words too common to say what a request is about; a short list is enough, bm25 weighs the rest.
_STOP_WORDS: Final = frozenset(
    """
    about above after again all also and any are because been before being below between both but
    can could did does doing done down during each few for from further had has have having her here
    hers him his how into its itself just let like more most much must not now off once only other
    our ours out over own please same she should some such than that the their theirs them then
    there these they this those through too under until very was were what when where which while
    who whom why will with would you your yours yourself
    """.split()  # noqa: SIM905 (a word list reads better as text)
)
# Plan item kinds whose message is in the plan as it was written; a trimmed result's text is not.
_VERBATIM_KINDS: Final = frozenset({"current-request", "message", "pin"})


def retrieval_query_terms(text: str, *, limit: int = RETRIEVAL_QUERY_TERMS) -> tuple[str, ...]:
    """The distinct content words of ``text`` (lower-cased, 3+ characters, no stop words), in order."""
    terms: list[str] = []
    seen: set[str] = set()
    for match in _TERM.finditer(text):
        term = match.group().lower()
        if len(term) < _MIN_TERM_CHARS or term in _STOP_WORDS or term in seen:
            continue
        seen.add(term)
        terms.append(term)
        if len(terms) == limit:
            break
    return tuple(terms)


def _message_text(message: CanonicalMessage) -> str:
    parts: list[str] = []
    for block in message.blocks:
        if isinstance(block, TextBlock):
            parts.append(block.text)
        elif isinstance(block, ThinkingBlock):
            continue  # reasoning is the model's own scratch work, not evidence to bring back
        elif isinstance(block, ToolCallBlock):
            parts.append(f"{block.name} {stable_json(block.arguments)}")
        elif isinstance(block, ToolResultBlock):
            parts.append(f"{block.tool_name} result: {block.content}")
    return "\n".join(part for part in parts if part)


def _supplement(message: CanonicalMessage, text: str) -> SupplementalItem:
    if len(text) > RETRIEVED_TEXT_MAX_CHARS:
        text = text[:RETRIEVED_TEXT_MAX_CHARS] + " [... cut; /context restore shows the rest]"
    heading = f"[earlier in this session, {message.role} message {message.source_entry_id}]"
    return SupplementalItem(
        id=f"retrieved:{message.id}",
        kind="retrieved-history",
        text=f"{heading}\n{text}",
        source_ids=(message.id,),
    )


def retrieve_history(
    store: DerivedStore,
    session_id: str,
    messages: Sequence[CanonicalMessage],
    plan: ContextPlan,
    *,
    limit: int = RETRIEVAL_HITS_DEFAULT,
) -> tuple[SupplementalItem, ...]:
    """Up to ``limit`` supplements for messages of ``messages`` that ``plan`` does not hold verbatim.

    The query is made of the last user message's words; hits are taken in bm25 order. Messages flagged
    ``local_only`` or ``synthetic``, the last user message itself and messages with no text are never
    retrieved. An empty tuple when nothing qualifies.
    """
    if limit <= 0 or not messages:
        return ()
    request = next((message for message in reversed(messages) if message.role == "user"), None)
    if request is None:
        return ()
    terms = retrieval_query_terms(_message_text(request))
    if not terms:
        return ()
    held = {item.message_id for item in plan.items if item.kind in _VERBATIM_KINDS}
    by_entry: dict[str, CanonicalMessage] = {}
    for message in messages:
        by_entry.setdefault(message.source_entry_id, message)
    hits = store.search(session_id, " ".join(terms), limit=limit * _HITS_PER_RESULT, match="any")
    found: list[SupplementalItem] = []
    for entry_id in _unique(hit.entry_id for hit in hits):
        candidate = by_entry.get(entry_id)
        if candidate is None or candidate is request or candidate.id in held:
            continue
        if candidate.flags.local_only or candidate.flags.synthetic:
            continue
        text = _message_text(candidate)
        if text:
            found.append(_supplement(candidate, text))
            if len(found) == limit:
                break
    return tuple(found)


def _unique(values: Iterable[str]) -> Iterable[str]:
    seen: set[str] = set()
    for value in values:
        if value not in seen:
            seen.add(value)
            yield value
