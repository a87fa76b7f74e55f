"""Mandatory items: the current request and pinned messages, always sent verbatim, or no plan at all."""

from __future__ import annotations

import contextlib

from ._common import original_unit_tokens
from ._decisions import FallbackError, MandatoryReason, PlanInputs
from ._types import PRIORITY_CURRENT_REQUEST, PRIORITY_PERSISTENT_PIN, PRIORITY_PIN_LABEL, PlanDiagnostic

_CURRENT_REQUEST = MandatoryReason("current-request", "current-request", PRIORITY_CURRENT_REQUEST)
_PIN_LABEL = MandatoryReason("pin", "pin-label", PRIORITY_PIN_LABEL)
_PERSISTENT_PIN = MandatoryReason("pin", "persistent-pin", PRIORITY_PERSISTENT_PIN)


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


def select_mandatory(inputs: PlanInputs) -> dict[int, MandatoryReason]:
    """Unit root -> why it is mandatory. Raises :class:`FallbackError` when they cannot fit."""
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
    if fixed + current_tokens > budget.hard_limit:
        raise FallbackError("message-exceeds-window", "the current request alone exceeds the hard limit")
    if pin_tokens > budget.pin_cap or fixed + current_tokens + pin_tokens > budget.hard_limit:
        raise FallbackError("pins-exceed-cap", "pinned messages exceed their share of the hard limit")
    return chosen
