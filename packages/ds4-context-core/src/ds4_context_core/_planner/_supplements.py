"""Supplements: host-supplied memory, summaries, retrieved history and project snippets, each kind
within its ceiling, highest priority first. Among summaries of equal priority, the model-written ones
(id prefix ``ds4-summary:``) come first, in the order of the history they cover, then the others by
id: a summary of a later span lands after the ones already sent, so their bytes stay in the cached
prefix, and a host's digest, which changes at every compaction, comes after all of them."""

from __future__ import annotations

import contextlib
from typing import Final

from ds4_context_core._history._model import CanonicalMessage, MessageFlags, Provenance, TextBlock

from ._decisions import Decisions, PlanInputs, Supplement, Window
from ._types import (
    DEFAULT_SUPPLEMENT_PRIORITY,
    SUMMARY_ID_PREFIX,
    SUPPLEMENT_KINDS,
    PlanExclusion,
    SupplementalItem,
)

_MAX_ID_CHARS: Final = 256


def _clean_id(value: object) -> bool:
    return (
        isinstance(value, str) and 0 < len(value) <= _MAX_ID_CHARS and all(ch.isprintable() for ch in value)
    )


def _valid_items(inputs: PlanInputs, decisions: Decisions) -> list[SupplementalItem]:
    """Well-formed items with unique ids, highest priority first (ties by id); the rest are counted."""
    valid: list[SupplementalItem] = []
    seen: set[str] = set()
    invalid = 0
    with contextlib.suppress(TypeError):
        for item in inputs.supplemental:
            if (
                type(item) is not SupplementalItem
                or not _clean_id(item.id)
                or item.kind not in SUPPLEMENT_KINDS
                or not isinstance(item.text, str)
                or item.id in seen
                or (item.priority is not None and type(item.priority) is not int)
                or item.placement not in (None, "front")
            ):
                invalid += 1
                continue
            seen.add(item.id)
            valid.append(item)
    if invalid:
        decisions.exclusions.append(PlanExclusion(reason="supplement-invalid", count=invalid, tokens=0))
    position_of = inputs.index.position_of
    size = len(position_of) + 1

    def order(item: SupplementalItem) -> tuple[int, int, str]:
        # Summaries of earlier spans first, each where the span it covers sits in history: a new summary
        # of a later span lands after the ones already sent, so their bytes stay in the cached prefix.
        first = size
        if item.kind == "summary" and item.id.startswith(SUMMARY_ID_PREFIX) and item.source_ids:
            first = min((position_of.get(source, size) for source in item.source_ids), default=size)
        return -priority_of(item), first, item.id

    valid.sort(key=order)
    return valid


def priority_of(item: SupplementalItem) -> int:
    return item.priority if item.priority is not None else DEFAULT_SUPPLEMENT_PRIORITY[item.kind]


def select_supplements(
    inputs: PlanInputs, decisions: Decisions, anchor: CanonicalMessage
) -> list[Supplement]:
    """The supplements that fit their kind's ceiling, as messages with ``anchor``'s provenance."""
    budget = inputs.budget
    ceilings = {
        "memory": budget.memory_ceiling,
        "summary": budget.summary_ceiling,
        "retrieved-history": budget.retrieved_history_ceiling,
        "project-snippet": budget.project_snippet_ceiling,
    }
    used: dict[str, int] = {}
    chosen: list[Supplement] = []
    provenance = anchor.provenance
    for item in _valid_items(inputs, decisions):
        message = CanonicalMessage(
            id="ds4-supplement:" + item.id,
            source_entry_id=item.id,
            role="user",
            blocks=(TextBlock(text=item.text),),
            provenance=Provenance(
                source=provenance.source,
                session_id=provenance.session_id,
                entry_id=item.id,
                runtime_id=provenance.runtime_id,
            ),
            flags=MessageFlags(synthetic=True),
        )
        tokens = inputs.estimator(message)
        if used.get(item.kind, 0) + tokens > ceilings[item.kind]:
            decisions.exclusions.append(
                PlanExclusion(
                    reason="supplement-over-ceiling", count=1, tokens=tokens, message_ids=(message.id,)
                )
            )
            continue
        used[item.kind] = used.get(item.kind, 0) + tokens
        chosen.append(Supplement(priority_of(item), item.id, message, tokens, item))
    return chosen


def hold_reserve(inputs: PlanInputs, window: Window, host_tokens: int) -> None:
    """Count the host's supplements (``host_tokens``) as at least ``inputs.supplement_reserve`` in the
    window's usage, so that a host which rebuilds them smaller for the cut a compaction chose, and plans
    again from the same state, gets the same compaction instead of a plan that fits at the old cut.
    Supplements never take more than their kinds' ceilings, and neither does the reserve."""
    budget = inputs.budget
    most = (
        budget.memory_ceiling
        + budget.summary_ceiling
        + budget.retrieved_history_ceiling
        + budget.project_snippet_ceiling
    )
    room = max(0, min(inputs.supplement_reserve, most) - host_tokens)
    window.reserve += room
    window.usage += room


def release_reserve(window: Window) -> None:
    """Take the held room out of the window's usage once the compaction has decided."""
    window.usage -= window.reserve
    window.reserve = 0


def drop_supplements(inputs: PlanInputs, decisions: Decisions, window: Window) -> None:
    """Drop supplements, lowest priority first, until the window's usage fits the hard limit; the room
    held for them (``hold_reserve``) goes before any of them."""
    hard_limit = inputs.budget.hard_limit
    if window.reserve and window.usage > hard_limit:
        freed = min(window.reserve, window.usage - hard_limit)
        window.reserve -= freed
        window.usage -= freed
    kept = window.supplements
    usage = window.usage
    while kept and usage > hard_limit:
        supplement = kept.pop()  # lowest priority is last
        usage -= supplement.tokens
        decisions.dropped_supplements.append(supplement.message.id)
        decisions.exclusions.append(
            PlanExclusion(
                reason="supplement-over-budget",
                count=1,
                tokens=supplement.tokens,
                message_ids=(supplement.message.id,),
            )
        )
    window.usage = usage
