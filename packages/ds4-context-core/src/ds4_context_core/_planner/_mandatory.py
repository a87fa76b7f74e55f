"""Mandatory items: the current request and pinned messages, always sent verbatim, or no plan at all."""

from __future__ import annotations

import contextlib
from typing import Final

import msgspec

from ds4_context_core._history._model import CanonicalBlock, CanonicalMessage, TextBlock

from ._common import original_unit_tokens
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
