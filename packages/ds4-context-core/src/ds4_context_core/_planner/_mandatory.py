"""Mandatory items: the current request and pinned messages, always sent verbatim, or no plan at all."""

from __future__ import annotations

import contextlib
from typing import Final

import msgspec

from ds4_context_core._history._model import CanonicalBlock, CanonicalMessage, TextBlock

from ._common import head_budget, original_unit_tokens
from ._decisions import Decisions, FallbackError, MandatoryReason, PlanInputs, Trim
from ._pruning import trim_text
from ._types import (
    PRIORITY_CURRENT_REQUEST,
    PRIORITY_PERSISTENT_PIN,
    PRIORITY_PIN_LABEL,
    PRIORITY_RECENT_TURN,
    PlanDiagnostic,
)

_CURRENT_REQUEST = MandatoryReason("current-request", "current-request", PRIORITY_CURRENT_REQUEST)
_PIN_LABEL = MandatoryReason("pin", "pin-label", PRIORITY_PIN_LABEL)
_PERSISTENT_PIN = MandatoryReason("pin", "persistent-pin", PRIORITY_PERSISTENT_PIN)
RETAINED_FRONT: Final = MandatoryReason("message", "retained-history", PRIORITY_RECENT_TURN)
FIXED_HEAD: Final = MandatoryReason("message", "fixed-head", PRIORITY_RECENT_TURN)


def _label_positions(inputs: PlanInputs) -> list[int]:
    """Positions of the messages named in ``pins=``; a diagnostic counts the ids not in the history."""
    position_of = inputs.index.position_of
    found: list[int] = []
    unknown = 0
    pins = inputs.pins
    if isinstance(pins, str | bytes):
        pins = ()
    with contextlib.suppress(TypeError):
        for pin in pins:
            position = position_of.get(pin) if isinstance(pin, str) else None
            if position is None:
                unknown += 1
            else:
                found.append(position)
    if unknown:
        inputs.diagnostics.append(
            PlanDiagnostic(code="pin-unknown", detail=f"{unknown} pin(s) not in history")
        )
    return found


def _head_and_tail(message: CanonicalMessage, keep_chars: int) -> CanonicalMessage | None:
    """A copy of ``message`` whose text blocks keep about ``keep_chars`` characters in all, head and tail
    around a marker naming how to restore the rest; ``None`` when nothing would shrink."""
    total = sum(len(block.text) for block in message.blocks if type(block) is TextBlock)
    if total <= 0:
        return None
    blocks: list[CanonicalBlock] = []
    changed = False
    for block in message.blocks:
        if type(block) is TextBlock:
            share = keep_chars * len(block.text) // total
            trimmed = trim_text(block.text, share - share // 2, share // 2, message.id)
            if trimmed is not None:
                blocks.append(msgspec.structs.replace(block, text=trimmed))
                changed = True
                continue
        blocks.append(block)
    if not changed:
        return None
    flags = msgspec.structs.replace(message.flags, synthetic=True)
    return msgspec.structs.replace(message, blocks=tuple(blocks), flags=flags)


def _fit_current_request(inputs: PlanInputs, position: int, room: int) -> Trim | None:
    """The current request cut to its head and tail so that it costs at most ``room`` tokens, or ``None``.

    Deterministic (the same message and room give the same copy), so re-plans of one oversized request
    share their prefix. The text shrinks by halves from a proportional first guess until it fits.
    """
    message = inputs.index.view[position]
    tokens = inputs.index.token(position)
    if room <= 0 or tokens <= 0:
        return None
    chars = sum(len(block.text) for block in message.blocks if type(block) is TextBlock)
    keep = int(chars * room / tokens * 0.9)
    while keep > 0:
        copy = _head_and_tail(message, keep)
        if copy is None:
            return None
        cost = inputs.estimator(copy)
        if cost <= room:
            return Trim(position=position, message=copy, tokens=cost, score=None)
        keep //= 2
    return None


def select_mandatory(inputs: PlanInputs, decisions: Decisions) -> dict[int, MandatoryReason]:
    """Unit root -> why it is mandatory. Raises :class:`FallbackError` when they cannot fit.

    A current request that alone passes the hard limit is sent as a head-and-tail copy
    (``decisions.oversized``) when it is a single message with text to cut; it is kept verbatim
    whenever it fits at all.
    """
    index = inputs.index
    current = index.current_request()
    if current is None:
        raise FallbackError("current-request-missing", "the history has no user request to answer")
    chosen: dict[int, MandatoryReason] = {}
    pin_tokens = 0
    incomplete = 0
    for positions, why in ((_label_positions(inputs), _PIN_LABEL), (index.pinned, _PERSISTENT_PIN)):
        for position in positions:
            root = index.unit_of(position)
            if root in index.incomplete:
                incomplete += 1
                continue
            previous = chosen.get(root)
            if previous is None:
                pin_tokens += original_unit_tokens(index, root)
            if previous is None or previous.priority < why.priority:
                chosen[root] = why
    if incomplete:
        inputs.diagnostics.append(
            PlanDiagnostic(
                code="pin-incomplete-group", detail=f"{incomplete} pin(s) in incomplete tool groups"
            )
        )
    current_root = index.unit_of(current)
    current_tokens = 0 if current_root in chosen else original_unit_tokens(index, current_root)
    chosen[current_root] = _CURRENT_REQUEST
    budget = inputs.budget
    fixed = budget.fixed_tokens
    if fixed > budget.hard_limit:
        raise FallbackError(
            "fixed-overhead-exceeds-hard-limit", "system prompt and tools exceed the hard limit"
        )
    decisions.oversized = None
    if fixed + current_tokens > budget.hard_limit:
        trim = None
        if current_root == current and len(index.unit_members(current_root)) == 1:
            # Room for the copy: the hard limit minus the overhead and the pins (older history is cut).
            trim = _fit_current_request(inputs, current, budget.hard_limit - fixed - pin_tokens)
        if trim is None:
            raise FallbackError("message-exceeds-window", "the current request alone exceeds the hard limit")
        decisions.oversized = trim
        current_tokens = trim.tokens
        inputs.diagnostics.append(
            PlanDiagnostic(
                code="current-request-trimmed",
                detail=f"{index.token(current) - trim.tokens} tokens of the current request elided",
            )
        )
    if pin_tokens > budget.pin_cap or fixed + current_tokens + pin_tokens > budget.hard_limit:
        raise FallbackError("pins-exceed-cap", "pinned messages exceed their share of the hard limit")
    return chosen


def retain_front(
    inputs: PlanInputs, decisions: Decisions, mandatory: dict[int, MandatoryReason]
) -> list[int]:
    """Keep in front the units the previous plan sent there that are no longer mandatory (the request
    of a turn the cut passed, once the next turn starts); returns their roots.

    Between compactions a plan extends the previous one: dropping the old request at the next user turn
    would change the plan's second message and cost the whole cached prefix. They go at the next
    compaction (``release_front``), when the prefix changes anyway.
    """
    index, cut = inputs.index, decisions.cut
    kept: list[int] = []
    for root in decisions.front:
        if root < cut and root not in mandatory and root not in index.incomplete:
            mandatory[root] = RETAINED_FRONT
            kept.append(root)
    return kept


def release_front(inputs: PlanInputs, mandatory: dict[int, MandatoryReason], kept: list[int]) -> int:
    """Forget the units :func:`retain_front` kept; returns the tokens they took."""
    freed = 0
    for root in kept:
        if mandatory.get(root) is RETAINED_FRONT:
            del mandatory[root]
            freed += original_unit_tokens(inputs.index, root)
    return freed


def retain_head(inputs: PlanInputs, decisions: Decisions, mandatory: dict[int, MandatoryReason]) -> None:
    """Keep the fixed head of the previous plan: its units become mandatory, so that no compaction
    trims, receipts or drops them and the plan keeps starting with the same messages.

    A head that no longer describes whole, complete units of this history (or that this configuration
    has no room for) is forgotten whole: a part of it would not be the previous plan's prefix anyway.
    """
    head = decisions.head
    if not head:
        return
    index = inputs.index
    parent = index.parent
    # The history extends the one the head was chosen in (``adopt_state``), so its roots stay roots;
    # what can change is only an old call answered again or left open by a rewrite the index allows.
    if (
        head_budget(inputs) <= 0
        or head[-1] >= inputs.size
        or not index.incomplete.keys().isdisjoint(head)
        or any(parent[root] >= 0 and parent[root] != root for root in head)
    ):
        decisions.head = ()
        decisions.head_tokens = 0
        return
    for root in head:
        mandatory.setdefault(root, FIXED_HEAD)


def head_tokens(decisions: Decisions) -> int:
    """The tokens of the fixed head's units as the history holds them."""
    return decisions.head_tokens if decisions.head else 0


def release_head(inputs: PlanInputs, decisions: Decisions, mandatory: dict[int, MandatoryReason]) -> int:
    """Forget the fixed head (its units go with the cut, but for those mandatory on their own); returns
    the tokens that leave the plan."""
    freed = 0
    for root in decisions.head:
        if mandatory.get(root) is FIXED_HEAD:
            del mandatory[root]
            freed += original_unit_tokens(inputs.index, root)
    decisions.head = ()
    decisions.head_tokens = 0
    return freed


def extend_head(inputs: PlanInputs, decisions: Decisions, mandatory: dict[int, MandatoryReason]) -> None:
    """Grow the fixed head over the units after it, within :func:`head_budget`, until a compaction has
    moved the cut past it (from then on it stays as it is).

    The head is the oldest history the plan sends, as the previous plan sent it (untrimmed, without
    receipt), so keeping it in front at a compaction keeps the prefix a prompt cache holds. Units that
    are mandatory anyway (the request of the turn in progress) join it too: they stay in it when they
    are mandatory no more. Only a plan that follows another grows it: a cold plan has no prefix to keep.
    """
    head = decisions.head
    if not decisions.adopted or (head and head[-1] < decisions.cut):
        return
    budget = head_budget(inputs)
    if budget <= 0:
        return
    index = inputs.index
    parent, find, members_of, incomplete = index.parent, index.find, index.unit_members, index.incomplete
    trims, receipt_of = decisions.trims, decisions.receipt_of
    used = head_tokens(decisions)
    chosen = list(head)
    start = head[-1] + 1 if head else decisions.cut
    for position in range(start, inputs.size):
        up = parent[position]
        if up >= 0 and (up if parent[up] == up else find(position)) != position:
            continue  # a later member of a unit rooted earlier
        if position in incomplete or position in receipt_of:
            break
        if trims and not trims.keys().isdisjoint(members_of(position)):
            break
        tokens = original_unit_tokens(index, position)
        if used + tokens > budget:
            break
        used += tokens
        chosen.append(position)
    if len(chosen) == len(head):
        return
    for root in chosen[len(head) :]:
        mandatory.setdefault(root, FIXED_HEAD)
    decisions.head = tuple(chosen)
    decisions.head_tokens = used
