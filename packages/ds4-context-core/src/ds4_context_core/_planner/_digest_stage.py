"""The planner's task digest: rendered for the history before the cut, in front of the plan's history
(after the fixed head, which a compaction keeps byte for byte while the digest changes).

The digest changes only when the cut moves, which happens only in a compaction, so between
compactions the front of the plan is byte-identical and the cached prefix survives. A compaction
makes room for the largest digest the budget allows (``digest_reserve``) before it frees tokens, so the
new, longer digest cannot push the next plan over the soft limit at once.
"""

from __future__ import annotations

import copy
from typing import Final

from ds4_context_core._history._model import CanonicalMessage, MessageFlags, Provenance, TextBlock

from ._decisions import Decisions, DigestState, PlanInputs, Supplement, Window
from ._digest import TaskDigestBuilder
from ._types import PRIORITY_SUMMARY, SupplementalItem

TASK_DIGEST_ITEM_ID: Final = "ds4-core-task-digest"
# The digest takes at most this share of the hard limit (and never more than the summary ceiling).
_DIGEST_SHARE: Final = 8
_MAX_DIGEST_TOKENS: Final = 8_000
_CHARS_PER_TOKEN: Final = 4
_STEADIER_KINDS: Final = frozenset({"memory", "summary"})


def digest_reserve(inputs: PlanInputs) -> int:
    """The most tokens the digest may take in this plan's budget (0 when it is off)."""
    if not inputs.config.planner.task_digest:
        return 0
    budget = inputs.budget
    return max(0, min(budget.summary_ceiling, budget.hard_limit // _DIGEST_SHARE, _MAX_DIGEST_TOKENS))


def _supplement(inputs: PlanInputs, text: str, anchor: CanonicalMessage) -> Supplement:
    item = SupplementalItem(id=TASK_DIGEST_ITEM_ID, kind="summary", text=text, priority=PRIORITY_SUMMARY)
    provenance = anchor.provenance
    message = CanonicalMessage(
        id="ds4-supplement:" + TASK_DIGEST_ITEM_ID,
        source_entry_id=TASK_DIGEST_ITEM_ID,
        role="user",
        blocks=(TextBlock(text=text),),
        provenance=Provenance(
            source=provenance.source,
            session_id=provenance.session_id,
            entry_id=TASK_DIGEST_ITEM_ID,
            runtime_id=provenance.runtime_id,
        ),
        flags=MessageFlags(synthetic=True),
    )
    return Supplement(PRIORITY_SUMMARY, TASK_DIGEST_ITEM_ID, message, inputs.estimator(message), item)


def _render(inputs: PlanInputs, builder: TaskDigestBuilder, limit: int) -> Supplement | None:
    index = inputs.index
    current = index.current_request()
    anchor = index.view[current if current is not None else 0]
    chars = limit * _CHARS_PER_TOKEN
    while chars >= 200:
        text = builder.render(chars)
        if text is None:
            return None
        supplement = _supplement(inputs, text, anchor)
        if supplement.tokens <= limit:
            return supplement
        chars = chars * limit // max(supplement.tokens, 1) - 100  # whole entries go until it fits
    return None


def digest_supplement(inputs: PlanInputs, decisions: Decisions, room: int | None = None) -> Supplement | None:
    """The digest of the history before ``decisions.cut`` within ``room`` tokens (default: the
    reserve), from the state's when the cut has not moved and it fits."""
    limit = digest_reserve(inputs)
    if room is not None:
        # A smaller room is rounded down to the reserve over a power of two, so that the steps of one
        # long turn, each with a little less room, still render the same digest (and share a prefix).
        while limit > room and limit >= 64:
            limit //= 2
        limit = min(limit, room)
    cut = decisions.cut
    held = decisions.digest
    if limit <= 0 or cut <= 0:
        if cut <= 0:
            decisions.digest = None
        return None
    if held is not None and held.cut == cut:
        supplement = held.supplement
        if supplement is None or supplement.tokens <= limit:
            return supplement
        if held.builder is not None:  # the same facts in fewer whole entries, kept until the cut moves
            supplement = _render(inputs, held.builder, limit)
            decisions.digest = DigestState(cut=cut, builder=held.builder, supplement=supplement)
            return supplement
    if held is not None and held.builder is not None and held.builder.consumed <= cut:
        # One this plan made (before its compaction) no state holds yet; an older one is copied, so that
        # an older state passed again finds its own intact.
        fresh = held.builder is decisions.fresh_builder
        builder = held.builder if fresh else copy.deepcopy(held.builder)
    else:
        builder = TaskDigestBuilder()
    decisions.fresh_builder = builder
    view = inputs.index.view
    start = builder.consumed
    # A slice of a tuple or list costs next to nothing per message; another sequence is read one by one.
    if isinstance(view, tuple | list):
        builder.feed(view[start:cut])
    else:
        builder.feed(view[position] for position in range(start, cut))
    supplement = _render(inputs, builder, limit)
    decisions.digest = DigestState(cut=cut, builder=builder, supplement=supplement)
    return supplement


def place_digest(window: Window, supplement: Supplement | None) -> None:
    """Put ``supplement`` among the window's supplements (replacing an older digest)."""
    old = next((s for s in window.supplements if s.item_id == TASK_DIGEST_ITEM_ID), None)
    if old is not None:
        window.supplements.remove(old)
        window.usage -= old.tokens
    if supplement is not None:
        insert_digest(window.supplements, supplement)
        window.usage += supplement.tokens


def insert_digest(supplements: list[Supplement], digest: Supplement) -> None:
    """Right after the host's memory and summaries, which change less often than the digest (it changes
    whenever the cut moves), and before the rest (retrieved history changes with every request): what
    changes least comes first in the cached prefix."""
    at = 0
    for number, supplement in enumerate(supplements):
        if supplement.item.kind in _STEADIER_KINDS:
            at = number + 1
    supplements.insert(at, digest)
