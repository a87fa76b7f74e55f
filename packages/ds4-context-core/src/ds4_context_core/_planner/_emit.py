"""Emit: the plan's messages and items in send order, from the window and the decisions.

Order: system messages the cut has passed (pinned), the fixed head (the oldest units kept, the same at
every compaction), front supplements (memory, summaries, items placed in front, the planner's task
digest last of them), the other mandatory units the cut has passed, then
the window in history order with trims and receipts applied; the other supplements go right before the
current request.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from typing import Final

import msgspec

from ds4_context_core._history._model import CanonicalMessage

from ._decisions import Decisions, MandatoryReason, PlanInputs, Supplement, Window
from ._mandatory import FIXED_HEAD
from ._types import PRIORITY_RECENT_TURN, PlanItem

_FRONT_KINDS: Final = frozenset({"memory", "summary"})


class Emitted(msgspec.Struct):
    """The plan's messages, one item per message, what ``restore`` finds, and the token sums."""

    messages: list[CanonicalMessage] = msgspec.field(default_factory=list)
    items: list[PlanItem] = msgspec.field(default_factory=list)
    restore: dict[str, tuple[CanonicalMessage, ...]] = msgspec.field(default_factory=dict)
    mandatory_tokens: int = 0
    supplement_tokens: int = 0
    history_tokens: int = 0


def _supplement_item(supplement: Supplement) -> PlanItem:
    return PlanItem(
        message_id=supplement.message.id,
        kind=supplement.item.kind,
        reason="supplement-priority",
        tokens=supplement.tokens,
        priority=supplement.priority,
        source_ids=supplement.item.source_ids,
    )


class _Emitter:
    """One emit pass; appends to ``out`` in send order."""

    __slots__ = ("back", "current", "decisions", "inputs", "out", "pointer", "user_positions")

    def __init__(self, inputs: PlanInputs, decisions: Decisions, back: list[Supplement]) -> None:
        self.inputs = inputs
        self.decisions = decisions
        self.back = back
        self.current = inputs.index.current_request()
        self.out = Emitted()
        self.user_positions = inputs.index.user_positions
        self.pointer = -2  # index into user_positions of the turn of the last position asked about

    def supplements(self, supplements: list[Supplement]) -> None:
        out = self.out
        for supplement in supplements:
            out.messages.append(supplement.message)
            out.items.append(_supplement_item(supplement))
            out.supplement_tokens += supplement.tokens

    def turn_of(self, position: int) -> str | None:
        """The id of the user message that opened the turn of ``position``."""
        # Positions arrive almost always in ascending order: walk forward, bisect otherwise.
        user_positions, pointer = self.user_positions, self.pointer
        if pointer == -2 or (pointer >= 0 and user_positions[pointer] > position):
            pointer = bisect.bisect_right(user_positions, position) - 1
        else:
            while pointer + 1 < len(user_positions) and user_positions[pointer + 1] <= position:
                pointer += 1
        self.pointer = pointer
        return self.inputs.messages[user_positions[pointer]].id if pointer >= 0 else None

    def receipt(self, key: int) -> None:
        decisions, out, source = self.decisions, self.out, self.inputs.messages
        receipt = decisions.receipts[key]
        originals = tuple(source[p] for p in receipt.positions)
        out.restore[receipt.message.id] = originals
        for original in originals:
            out.restore[original.id] = (original,)
        out.messages.append(receipt.message)
        out.items.append(
            PlanItem(
                message_id=receipt.message.id,
                kind="receipt",
                reason="layer-2-receipt",
                tokens=receipt.tokens,
                priority=PRIORITY_RECENT_TURN,
                original_index=receipt.positions[0],
                source_ids=tuple(o.id for o in originals),
            )
        )
        out.history_tokens += receipt.tokens

    def mandatory(self, root: int, why: MandatoryReason) -> None:
        """A mandatory unit, verbatim (but for an oversized current request's head-and-tail copy)."""
        index, out, current = self.inputs.index, self.out, self.current
        if root == current:
            self.supplements(self.back)
        group_id = index.group_id(root)
        oversized = self.decisions.oversized
        for position in index.unit_members(root):
            message, tokens = index.view[position], index.token(position)
            if oversized is not None and position == oversized.position:
                out.restore[oversized.message.id] = (message,)
                message, tokens = oversized.message, oversized.tokens
            kind = "message" if why.kind == "current-request" and position != current else why.kind
            out.mandatory_tokens += tokens
            out.messages.append(message)
            out.items.append(
                PlanItem(
                    message_id=message.id,
                    kind=kind,
                    reason=why.reason,
                    tokens=tokens,
                    priority=why.priority,
                    original_index=position,
                    group_id=group_id,
                    turn_id=self.turn_of(position),
                )
            )

    def leading(self, root: int, why: MandatoryReason) -> None:
        """A unit in front of the supplements: a system message or the fixed head."""
        if why is FIXED_HEAD and root != self.current:
            self.verbatim(root, why.reason)
        else:
            self.mandatory(root, why)

    def verbatim(self, root: int, reason: str) -> None:
        """A unit sent as the history holds it (the fixed head): no trim, receipt or copy applies."""
        index, out, turn_of = self.inputs.index, self.out, self.turn_of
        view, token_list = index.view, index.tokens
        group_id = index.group_id(root) if index.parent[root] >= 0 else None
        for position in index.unit_members(root):
            message, tokens = view[position], token_list[position]
            if tokens < 0:  # never the case for a head chosen by its tokens; estimated when it is
                tokens = index.token(position)
            out.mandatory_tokens += tokens
            out.messages.append(message)
            out.items.append(
                PlanItem(
                    message_id=message.id,
                    kind="message",
                    reason=reason,
                    tokens=tokens,
                    priority=PRIORITY_RECENT_TURN,
                    original_index=position,
                    group_id=group_id,
                    turn_id=turn_of(position),
                )
            )

    def unit(self, root: int) -> None:
        """A window unit with its trims or receipt applied."""
        index, decisions, out, source = self.inputs.index, self.decisions, self.out, self.inputs.messages
        if root == self.current:
            self.supplements(self.back)
        key = decisions.receipt_of.get(root)
        if key is not None:
            if key == root:
                self.receipt(key)
            return
        group_id = index.group_id(root)
        recent = root >= decisions.tail_root
        for position in index.unit_members(root):
            repaired = decisions.interrupted.get(position)
            trim = decisions.trims.get(position)
            if repaired is not None:
                message, tokens, kind, score = (
                    repaired.message,
                    repaired.tokens,
                    "interrupted-tool-call",
                    None,
                )
                reason = "recent-tail" if recent else "retained-history"
                out.restore[message.id] = (source[position],)
            elif trim is not None:
                message, tokens = trim.message, trim.tokens
                kind, reason, score = "trimmed-tool-result", "layer-1-trimmed", trim.score
                out.restore[message.id] = (source[position],)
            else:
                message, tokens = index.view[position], index.token(position)
                kind, score = "message", None
                reason = "recent-tail" if recent else "retained-history"
            out.history_tokens += tokens
            out.messages.append(message)
            out.items.append(
                PlanItem(
                    message_id=message.id,
                    kind=kind,
                    reason=reason,
                    tokens=tokens,
                    priority=PRIORITY_RECENT_TURN,
                    original_index=position,
                    group_id=group_id,
                    turn_id=self.turn_of(position),
                    score=score,
                )
            )


def emit(
    inputs: PlanInputs, decisions: Decisions, window: Window, mandatory: Mapping[int, MandatoryReason]
) -> Emitted:
    """The plan's messages and items in send order."""
    index = inputs.index
    front: list[Supplement] = []
    back: list[Supplement] = []
    for supplement in window.supplements:
        item = supplement.item
        (front if item.kind in _FRONT_KINDS or item.placement == "front" else back).append(supplement)
    emitter = _Emitter(inputs, decisions, back)
    passed = sorted(root for root in mandatory if root < decisions.cut)
    # A system message the cut passed (kept as a pin) still leads the plan, before the supplements.
    view = index.view
    leading = [root for root in passed if view[root].role == "system"]
    # Then the fixed head, which stays byte for byte across compactions, before the digest that
    # changes at each of them: a compaction keeps the cached prefix up to the digest.
    systems = set(leading)
    leading += [root for root in decisions.head if root < decisions.cut and root not in systems]
    for root in leading:
        emitter.leading(root, mandatory[root])
    emitter.supplements(front)
    done = set(leading)
    for root in passed:
        if root not in done:
            emitter.mandatory(root, mandatory[root])
    out = emitter.out
    messages, items = out.messages, out.items
    turn_of = emitter.turn_of
    tail_root = decisions.tail_root
    view, token_list, parent = index.view, index.tokens, index.parent
    receipt_of, trims, members_of = decisions.receipt_of, decisions.trims, index.unit_members
    interrupted = decisions.interrupted_roots
    history_tokens = 0  # of the inline cases below; the emitter counts the rest
    for root in window.units:
        if root in mandatory:
            emitter.mandatory(root, mandatory[root])
            continue
        if root in receipt_of:
            emitter.unit(root)
            continue
        reason = "recent-tail" if root >= tail_root else "retained-history"
        if parent[root] < 0:
            # The common case, kept inline: a plain message inside the window.
            message, tokens = view[root], token_list[root]
            history_tokens += tokens
            messages.append(message)
            items.append(
                PlanItem(
                    message_id=message.id,
                    kind="message",
                    reason=reason,
                    tokens=tokens,
                    priority=PRIORITY_RECENT_TURN,
                    original_index=root,
                    turn_id=turn_of(root),
                )
            )
            continue
        group = members_of(root)
        if (trims and not trims.keys().isdisjoint(group)) or root in interrupted:
            emitter.unit(root)
            continue
        # The common tool step, kept inline: a call and its results, untouched.
        group_id = index.group_id(root)
        for position in group:
            message, tokens = view[position], token_list[position]
            history_tokens += tokens
            messages.append(message)
            items.append(
                PlanItem(
                    message_id=message.id,
                    kind="message",
                    reason=reason,
                    tokens=tokens,
                    priority=PRIORITY_RECENT_TURN,
                    original_index=position,
                    group_id=group_id,
                    turn_id=turn_of(position),
                )
            )
    out.history_tokens += history_tokens
    return out
