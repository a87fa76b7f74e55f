"""The fallback plan: fail open to the native context (complete tool groups only), or closed (send
nothing) when privacy failed. Every fallback carries a code from ``PLAN_FALLBACK_CODES``."""

from __future__ import annotations

from typing import Any

import msgspec

from ds4_context_core._model import CanonicalMessage, ModelDescriptor

from ._decisions import FallbackError
from ._index import HistoryIndex
from ._manifest import MAX_DIAGNOSTICS
from ._plan import ContextPlan
from ._state import PlanState
from ._types import (
    FALLBACK_MODE_NATIVE,
    PLAN_CONTRACT_VERSION,
    PRIORITY_RECENT_TURN,
    PlanBudget,
    PlanDiagnostic,
    PlanFallback,
    PlanItem,
    PlanManifest,
)
from ._validate import atomicity_problem


def _empty_budget(model: object, fixed_tokens: object) -> PlanBudget:
    window = model.context_window if isinstance(model, ModelDescriptor) else 0
    fixed = fixed_tokens if type(fixed_tokens) is int else 0
    return PlanBudget(
        context_window=window if type(window) is int else 0,
        output_reserve=0,
        safety_margin=0,
        hard_limit=0,
        soft_limit=0,
        target_tokens=0,
        calibration_ratio=1.0,
        recent_tail_ceiling=0,
        retrieved_history_ceiling=0,
        project_snippet_ceiling=0,
        summary_ceiling=0,
        memory_ceiling=0,
        pin_cap=0,
        fixed_tokens=fixed,
    )


def _safe_as_is(messages: tuple[Any, ...]) -> bool:
    """Whether the history may go to the provider as it is: canonical messages, no split tool group."""
    try:
        return all(type(m) is CanonicalMessage for m in messages) and atomicity_problem(messages) is None
    except Exception:  # a message whose fields are not what its type says: not safe as it is
        return False


def _native_from_index(index: HistoryIndex) -> tuple[list[CanonicalMessage], list[PlanItem]]:
    """Every message of a complete tool unit or none, with the index's estimates."""
    out: list[CanonicalMessage] = []
    items: list[PlanItem] = []
    for position, message in enumerate(index.view):
        root = index.unit_of(position)
        if root in index.incomplete:
            continue
        out.append(message)
        items.append(
            PlanItem(
                message_id=message.id,
                kind="message",
                reason="native-fallback",
                tokens=index.token(position),
                priority=PRIORITY_RECENT_TURN,
                original_index=position,
                group_id=index.group_id(root),
                turn_id=index.turn_id(position),
            )
        )
    return out, items


def _native_as_is(messages: tuple[Any, ...]) -> tuple[list[CanonicalMessage], list[PlanItem]]:
    """The history unchanged (no estimates: it could not be indexed)."""
    items = [
        PlanItem(
            message_id=message.id,
            kind="message",
            reason="native-fallback",
            tokens=0,
            priority=PRIORITY_RECENT_TURN,
            original_index=position,
        )
        for position, message in enumerate(messages)
    ]
    return list(messages), items


def fallback_plan(
    failure: FallbackError,
    index: HistoryIndex | None,
    *,
    messages: tuple[Any, ...],
    model: object,
    fixed_tokens: object,
    state: PlanState | None,
    diagnostics: list[PlanDiagnostic],
) -> ContextPlan:
    """The plan to send when no normal plan can be built (``failure`` says why)."""
    out: list[CanonicalMessage] = []
    items: list[PlanItem] = []
    native = failure.mode == FALLBACK_MODE_NATIVE
    if index is not None and native and index.duplicate_id is None:
        try:
            index.ensure_known(0)
        except Exception:  # an estimate that fails: as if indexing had failed, as it would have eagerly
            index = None
    if native and index is not None and index.duplicate_id is None:
        out, items = _native_from_index(index)
    elif native and _safe_as_is(messages):
        out, items = _native_as_is(messages)
    history_tokens = sum(item.tokens for item in items)
    fixed = fixed_tokens if type(fixed_tokens) is int and fixed_tokens >= 0 else 0
    budget = msgspec.structs.replace(
        _empty_budget(model, fixed_tokens), history_tokens=history_tokens, total_tokens=fixed + history_tokens
    )
    source = tuple(m for m in messages if type(m) is CanonicalMessage) if index is None else index.source
    manifest = PlanManifest(
        contract_version=PLAN_CONTRACT_VERSION,
        history_messages=len(messages),
        included_messages=len(out),
        native_tokens=fixed + history_tokens,
        planned_tokens=fixed + history_tokens,
        saved_tokens=0,
        shared_prefix_messages=0,
        shared_prefix_tokens=0,
        diagnostics=tuple(diagnostics[:MAX_DIAGNOSTICS]),
        fallback=PlanFallback(mode=failure.mode, code=failure.code, detail=failure.detail[:200]),
    )
    kept_state = state if isinstance(state, PlanState) else PlanState(index=index)
    return ContextPlan(
        messages=tuple(out),
        items=tuple(items),
        budget=budget,
        manifest=manifest,
        state=kept_state,
        _source=source,
        _positions=index.position_of
        if index is not None
        else {m.id: i for i, m in enumerate(source) if type(m.id) is str},  # restore looks up str ids
    )
