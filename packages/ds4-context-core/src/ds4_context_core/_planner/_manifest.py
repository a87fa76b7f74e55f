"""The manifest: what is in the plan, what is out and why, and the figures of the whole history.

A cold plan of a long history estimates only its newest messages; the figures that also count the rest
(the native total, the before-cut exclusion, a compaction's ``tokens_before``) are completed on the
first read of ``plan.manifest`` by :class:`ManifestCompletion`.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Final

import msgspec

from ds4_context_core._history._model import CanonicalMessage

from ._decisions import BeforeCut, Decisions, PlanInputs
from ._emit import Emitted
from ._index import HistoryIndex
from ._receipts import receipt_records
from ._types import PLAN_CONTRACT_VERSION, PlanExclusion, PlanManifest

MAX_LISTED_IDS: Final = 64
MAX_DIAGNOSTICS: Final = 32


class ManifestCompletion:
    """Completes a manifest with the figures that need estimates of history no plan sends.

    They are added on the first read of ``plan.manifest``, from the same estimates an eager pass would
    have made, so the manifest is the same value either way. Thread-safe; the result is kept.
    """

    __slots__ = (
        "_before_cut",
        "_cut",
        "_fixed",
        "_index",
        "_lock",
        "_partial",
        "_size",
        "_skipped",
        "_value",
    )

    def __init__(
        self,
        partial: PlanManifest,
        index: HistoryIndex,
        *,
        size: int,
        fixed: int,
        cut: int,
        skipped: tuple[int, int] | None,
        before_cut: BeforeCut | None,
    ) -> None:
        self._partial = partial
        self._index = index
        self._size = size
        self._fixed = fixed
        self._cut = cut
        self._skipped = skipped
        self._before_cut = before_cut
        self._lock = threading.Lock()
        self._value: PlanManifest | None = None

    def __call__(self) -> PlanManifest:
        value = self._value
        if value is not None:
            return value
        with self._lock:
            if self._value is None:
                self._value = self._complete()
            return self._value

    def _complete(self) -> PlanManifest:
        partial, index = self._partial, self._index
        native = self._fixed + index.prefix(self._size)
        exclusions = partial.exclusions
        before_cut = self._before_cut
        if before_cut is not None:
            exclusion = PlanExclusion(
                reason="before-cut",
                count=before_cut.count,
                tokens=index.prefix(self._cut) + before_cut.tokens,
                first_message_id=before_cut.first_message_id,
                last_message_id=before_cut.last_message_id,
            )
            exclusions = (*exclusions, exclusion)
        compaction = partial.compaction
        if compaction is not None and self._skipped is not None:
            start, end = self._skipped
            skipped = index.prefix(end) - index.prefix(start)
            compaction = msgspec.structs.replace(compaction, tokens_before=compaction.tokens_before + skipped)
        return msgspec.structs.replace(
            partial,
            native_tokens=native,
            saved_tokens=native - partial.planned_tokens,
            exclusions=exclusions,
            compaction=compaction,
        )


def _incomplete_exclusions(inputs: PlanInputs, decisions: Decisions) -> tuple[int, int]:
    """One exclusion per reason a tool unit can never be sent; the count and tokens of those messages
    that lie before the cut (the before-cut exclusion must not count them twice)."""
    index, source, cut = inputs.index, inputs.messages, decisions.cut
    by_reason: dict[str, list[int]] = {}
    for root in sorted(index.incomplete):
        if root in decisions.interrupted_roots:
            continue  # sent, repaired (``_interrupted``)
        by_reason.setdefault(index.incomplete[root], []).extend(index.unit_members(root))
    before = 0
    before_tokens = 0
    for reason in sorted(by_reason):
        positions = by_reason[reason]
        for position in positions:
            if position < cut:
                before += 1
                before_tokens += index.token(position)
        decisions.exclusions.append(
            PlanExclusion(
                reason=reason,
                count=len(positions),
                tokens=sum(index.token(p) for p in positions),
                message_ids=tuple(source[p].id for p in positions[:MAX_LISTED_IDS]),
            )
        )
    return before, before_tokens


def record_exclusions(
    inputs: PlanInputs, decisions: Decisions, mandatory: Mapping[int, object], stragglers: list[int]
) -> None:
    """Exclusions of incomplete tool units, and the before-cut exclusion (completed when read)."""
    index, source, cut = inputs.index, inputs.messages, decisions.cut
    incomplete_before, incomplete_before_tokens = _incomplete_exclusions(inputs, decisions)
    if cut <= 0:
        return
    kept_before = [p for root in mandatory if root < cut for p in index.unit_members(root) if p < cut]
    incomplete_stragglers = [p for p in stragglers if index.find(p) in index.incomplete]
    count = cut - len(kept_before) - incomplete_before + len(stragglers) - len(incomplete_stragglers)
    tokens = (
        -sum(index.token(p) for p in kept_before)
        - incomplete_before_tokens
        + sum(index.token(p) for p in stragglers)
        - sum(index.token(p) for p in incomplete_stragglers)
    )
    if count > 0:
        skip = set(kept_before)
        first = next((p for p in range(cut) if p not in skip), 0)
        last = next((p for p in range(cut - 1, -1, -1) if p not in skip), cut - 1)
        # The prefix sum up to the cut is added when the manifest is read (always last).
        decisions.before_cut = BeforeCut(count, tokens, source[first].id, source[last].id)


def _shared_prefix(previous: tuple[CanonicalMessage, ...], emitted: Emitted) -> tuple[int, int]:
    """Messages (and their tokens) this plan shares, as a prefix, with the previous plan."""
    shared = 0
    tokens = 0
    for old, new, item in zip(previous, emitted.messages, emitted.items, strict=False):
        if old is not new and old != new:
            break
        shared += 1
        tokens += item.tokens
    return shared, tokens


def build_manifest(
    inputs: PlanInputs,
    decisions: Decisions,
    emitted: Emitted,
    *,
    planned_tokens: int,
    previous_messages: tuple[CanonicalMessage, ...],
) -> PlanManifest | ManifestCompletion:
    """The manifest, complete when every estimate is known, else what completes it on first read."""
    index = inputs.index
    shared_messages, shared_tokens = _shared_prefix(previous_messages, emitted)
    partial = PlanManifest(
        contract_version=PLAN_CONTRACT_VERSION,
        history_messages=inputs.size,
        included_messages=sum(1 for item in emitted.items if item.original_index is not None),
        native_tokens=0,
        planned_tokens=planned_tokens,
        saved_tokens=0,
        shared_prefix_messages=shared_messages,
        shared_prefix_tokens=shared_tokens,
        exclusions=tuple(decisions.exclusions),
        receipts=receipt_records(decisions, inputs.messages),
        compaction=decisions.compaction,
        diagnostics=tuple(inputs.diagnostics[:MAX_DIAGNOSTICS]),
    )
    finish = ManifestCompletion(
        partial,
        index,
        size=inputs.size,
        fixed=inputs.budget.fixed_tokens,
        cut=decisions.cut,
        skipped=decisions.skipped_span,
        before_cut=decisions.before_cut,
    )
    # With every estimate already known the manifest costs nothing more: complete it now.
    return finish() if index.known_from == 0 else finish
