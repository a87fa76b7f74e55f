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
from itertools import islice
from typing import Final

from ds4_context_core import (
    CanonicalMessage,
)
from ds4_context_core.planner import ContextPlan, SupplementalItem
from ds4_context_engine.commands._text import message_text
from ds4_context_engine.store import DerivedStore

__all__ = [
    "RETRIEVAL_HITS_DEFAULT",
    "RETRIEVAL_QUERY_TERMS",
    "RETRIEVED_TEXT_MAX_CHARS",
    "retrieval_candidates",
    "retrieval_query_terms",
    "retrieve_history",
    "retrieved_supplements",
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
    retrieved. An empty tuple when nothing qualifies. (:func:`retrieval_candidates` and
    :func:`retrieved_supplements` are its two halves, for planning one request several times.)
    """
    return retrieved_supplements(
        retrieval_candidates(store, session_id, messages, limit=limit), plan, limit=limit
    )


def retrieval_candidates(
    store: DerivedStore,
    session_id: str,
    messages: Sequence[CanonicalMessage],
    *,
    limit: int = RETRIEVAL_HITS_DEFAULT,
) -> tuple[tuple[CanonicalMessage, str], ...]:
    """The messages (with their text) that may be retrieved for the last user message, best first.

    This is the search, which depends on the request only; which candidates a plan takes depends on what
    the plan holds (:func:`retrieved_supplements`).
    """
    if limit <= 0 or not messages:
        return ()
    request = next((message for message in reversed(messages) if message.role == "user"), None)
    if request is None:
        return ()
    terms = retrieval_query_terms(message_text(request.blocks, thinking=False))
    if not terms:
        return ()
    by_entry: dict[str, CanonicalMessage] = {}
    for message in messages:
        by_entry.setdefault(message.source_entry_id, message)
    hits = store.search(session_id, " ".join(terms), limit=limit * _HITS_PER_RESULT, match="any")
    found: list[tuple[CanonicalMessage, str]] = []
    for entry_id in _unique(hit.entry_id for hit in hits):
        candidate = by_entry.get(entry_id)
        if candidate is None or candidate is request:
            continue
        if candidate.flags.local_only or candidate.flags.synthetic:
            continue
        # reasoning is the model's own scratch work, not evidence to bring back
        text = message_text(candidate.blocks, thinking=False)
        if text.strip():
            found.append((candidate, text))
    return tuple(found)


def retrieved_supplements(
    candidates: Iterable[tuple[CanonicalMessage, str]],
    plan: ContextPlan,
    *,
    limit: int = RETRIEVAL_HITS_DEFAULT,
) -> tuple[SupplementalItem, ...]:
    """The first ``limit`` of ``candidates`` that ``plan`` does not hold verbatim, as supplements."""
    held = {item.message_id for item in plan.items if item.kind in _VERBATIM_KINDS}
    fresh = (_supplement(message, text) for message, text in candidates if message.id not in held)
    return tuple(islice(fresh, max(limit, 0)))


def _unique(values: Iterable[str]) -> Iterable[str]:
    seen: set[str] = set()
    for value in values:
        if value not in seen:
            seen.add(value)
            yield value
