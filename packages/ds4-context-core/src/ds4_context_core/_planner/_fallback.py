"""The fallback plan: fail open to the native context (complete tool groups only), or closed (send
nothing) when privacy failed. Every fallback carries a code from ``PLAN_FALLBACK_CODES``.

No fallback sends more than the hard limit when the budget is known: the native context goes out only
when it fits. Otherwise the newest whole tool units that fit are sent as an ordinary plan with a
``fallback-fitted`` diagnostic naming the failure, and when not even the newest one fits, nothing is
sent (mode ``blocked``)."""

from __future__ import annotations

from typing import Any

import msgspec

from ds4_context_core._history._model import CanonicalMessage, ModelDescriptor, ToolResultBlock
from ds4_context_core._tokens._estimators import fast_chars_v1

from ._decisions import FallbackError
from ._index import HistoryIndex, index_tool_units
from ._manifest import MAX_DIAGNOSTICS
from ._plan import ContextPlan
from ._state import PlanState
from ._structure import first_user_diagnostic, insert_first_user, omitted_note, structure_problem
from ._types import (
    FALLBACK_MODE_BLOCKED,
    FALLBACK_MODE_NATIVE,
    PLAN_CONTRACT_VERSION,
    PRIORITY_RECENT_TURN,
    PlanBudget,
    PlanDiagnostic,
    PlanExclusion,
    PlanFallback,
    PlanItem,
    PlanManifest,
)
from ._validate import atomicity_problem


def empty_budget(model: object, fixed_tokens: object) -> PlanBudget:
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
    """Every message of a complete tool unit or none, with the index's estimates, each unit as one run
    (a message written between a call and its results follows them), as every provider wants it."""
    out: list[CanonicalMessage] = []
    items: list[PlanItem] = []
    view = index.view
    for root in range(len(view)):
        if index.unit_of(root) != root or root in index.incomplete:
            continue  # a later member of a unit (sent with its root) or a unit that cannot be sent
        group_id = index.group_id(root)
        for position in index.unit_members(root):
            message = view[position]
            out.append(message)
            items.append(
                PlanItem(
                    message_id=message.id,
                    kind="message",
                    reason="native-fallback",
                    tokens=index.token(position),
                    priority=PRIORITY_RECENT_TURN,
                    original_index=position,
                    group_id=group_id,
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


def _sizes(
    index: HistoryIndex | None, out: list[CanonicalMessage], items: list[PlanItem]
) -> tuple[list[int], list[int]] | None:
    """Tokens of each native message and the number (in ``out``) of its tool unit's first message;
    chars-v1 estimates when the history has no index, ``None`` when even those fail."""
    if index is not None:
        number_of = {item.original_index: number for number, item in enumerate(items)}
        roots = [number_of[index.unit_of(item.original_index or 0)] for item in items]
        return [item.tokens for item in items], roots
    try:
        tokens = [fast_chars_v1(m) for m in out]
    except Exception:  # a message even chars-v1 cannot measure
        return None
    try:
        units = index_tool_units(out)
        return tokens, [units.unit_of(p) for p in range(len(out))]
    except Exception:  # malformed beyond grouping: all of it or nothing, as one unit
        return tokens, [0] * len(out)


def _current_request(out: list[CanonicalMessage]) -> int:
    """Where the request a plan answers is in ``out`` (the last user message that is neither a tool
    result nor synthetic, as the index defines it), or -1."""
    for number in range(len(out) - 1, -1, -1):
        message = out[number]
        flags = message.flags
        if (
            message.role == "user"
            and not (flags is not None and flags.synthetic)
            and not any(type(block) is ToolResultBlock for block in message.blocks)
        ):
            return number
    return -1


def _fit(
    index: HistoryIndex | None,
    out: list[CanonicalMessage],
    items: list[PlanItem],
    budget: PlanBudget,
    spare: int = 0,
) -> int:
    """Where the newest whole tool units that fit the hard limit (less ``spare``) start in ``out``: 0
    when all of it fits, ``len(out)`` when not even the newest unit does."""
    sizes = _sizes(index, out, items)
    if sizes is None:
        return len(out)
    tokens, roots = sizes
    room = budget.hard_limit - budget.fixed_tokens - spare
    if sum(tokens) <= room:
        return 0
    total = 0
    start = len(out)
    lowest = len(out)
    for number in range(len(out) - 1, -1, -1):
        total += tokens[number]
        if total > room:
            break
        lowest = min(lowest, roots[number])
        if lowest >= number:  # no unit of the newer messages starts before this one
            start = number
    return start


def _fitted(
    failure: FallbackError,
    out: list[CanonicalMessage],
    items: list[PlanItem],
    *,
    start: int,
    kept: list[PlanItem],
    budget: PlanBudget,
    diagnostics: list[PlanDiagnostic],
    history_messages: int,
) -> tuple[PlanManifest, PlanBudget]:
    """Manifest and budget of the newest ``out[start:]`` (sent as ``kept``, with any structure repair),
    as an ordinary plan with a warning."""
    native = budget.fixed_tokens + sum(item.tokens for item in items)
    history_tokens = sum(item.tokens for item in kept)
    planned = budget.fixed_tokens + history_tokens
    warning = PlanDiagnostic(
        code="fallback-fitted",
        detail=f"{failure.code}: the newest {len(items) - start} of {len(items)} messages fit the hard limit",
    )
    left_out = PlanExclusion(
        reason="before-cut",
        count=start,
        tokens=sum(item.tokens for item in items[:start]),
        first_message_id=out[0].id,
        last_message_id=out[start - 1].id,
    )
    manifest = PlanManifest(
        contract_version=PLAN_CONTRACT_VERSION,
        history_messages=history_messages,
        included_messages=len(kept),
        native_tokens=native,
        planned_tokens=planned,
        saved_tokens=native - planned,
        shared_prefix_messages=0,
        shared_prefix_tokens=0,
        exclusions=(left_out,),
        diagnostics=(*diagnostics[: MAX_DIAGNOSTICS - 1], warning),
    )
    fitted_budget = msgspec.structs.replace(budget, history_tokens=history_tokens, total_tokens=planned)
    return manifest, fitted_budget


def _repaired(
    out: list[CanonicalMessage],
    items: list[PlanItem],
    destination: str | None,
    diagnostics: list[PlanDiagnostic],
) -> bool:
    """Whether ``out``, after the first-user repair (in place), is what ``destination`` accepts."""
    if insert_first_user(out, items, destination, fast_chars_v1):
        diagnostics.append(first_user_diagnostic())
    return structure_problem(out, destination) is None


def _history_estimate(index: HistoryIndex | None) -> int:
    """The estimated tokens of the whole indexed history; 0 without an index or when an estimate fails."""
    if index is None or index.duplicate_id is not None:
        return 0
    try:
        return index.prefix(len(index.source))
    except Exception:  # an estimate that fails: as when indexing failed, there is no size to report
        return 0


def _unsendable(failure: FallbackError, destination: str | None) -> FallbackError:
    detail = f"the {destination} format cannot carry the native context ({failure.detail})"
    return FallbackError(failure.code, detail, FALLBACK_MODE_BLOCKED)


def fallback_plan(
    failure: FallbackError,
    index: HistoryIndex | None,
    *,
    messages: tuple[Any, ...],
    model: object,
    fixed_tokens: object,
    state: PlanState | None,
    diagnostics: list[PlanDiagnostic],
    budget: PlanBudget | None = None,
    destination: str | None = None,
) -> ContextPlan:
    """The plan to send when no normal plan can be built (``failure`` says why); ``budget`` is the
    call's budget when it could be computed; ``destination`` the wire format whose rules it obeys."""
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
    source = tuple(m for m in messages if type(m) is CanonicalMessage) if index is None else index.source
    kept_state = state if isinstance(state, PlanState) else PlanState(index=index)
    positions = (
        index.position_of
        if index is not None
        else {m.id: i for i, m in enumerate(source) if type(m.id) is str}  # restore looks up str ids
    )
    # An Anthropic plan may need a user note first: room for it is kept when fitting.
    spare = fast_chars_v1(omitted_note(out[-1])) if out and destination == "anthropic" else 0
    if budget is not None and failure.mode == FALLBACK_MODE_NATIVE:
        start = _fit(index, out, items, budget, spare)
        if 0 < start < len(out) and start > _current_request(out):
            start = len(out)  # a fitted plan without the request it answers is no plan
        if start >= len(out) and (out or budget.fixed_tokens > budget.hard_limit):
            failure = FallbackError(
                failure.code, f"nothing fits the hard limit ({failure.detail})", FALLBACK_MODE_BLOCKED
            )
            out, items = [], []
        elif start > 0:
            kept_out, kept_items = out[start:], items[start:]
            if not _repaired(kept_out, kept_items, destination, diagnostics):
                failure = _unsendable(failure, destination)
                out, items = [], []
            else:
                manifest, fitted = _fitted(
                    failure,
                    out,
                    items,
                    start=start,
                    kept=kept_items,
                    budget=budget,
                    diagnostics=diagnostics,
                    history_messages=len(messages),
                )
                return ContextPlan(
                    messages=tuple(kept_out),
                    items=tuple(kept_items),
                    budget=fitted,
                    manifest=manifest,
                    state=kept_state,
                    _source=source,
                    _positions=positions,
                )
    if out and not _repaired(out, items, destination, diagnostics):
        failure = _unsendable(failure, destination)
        out, items = [], []
    history_tokens = sum(item.tokens for item in items)
    fixed = fixed_tokens if type(fixed_tokens) is int and fixed_tokens >= 0 else 0
    # A blocked plan sends nothing, but the history it refused still has its size: 0 would read as an
    # empty session (and a "saved" of nothing) to whoever compares plans.
    native_history = history_tokens if out else _history_estimate(index)
    empty = msgspec.structs.replace(
        empty_budget(model, fixed_tokens), history_tokens=history_tokens, total_tokens=fixed + history_tokens
    )
    manifest = PlanManifest(
        contract_version=PLAN_CONTRACT_VERSION,
        history_messages=len(messages),
        included_messages=len(out),
        native_tokens=fixed + native_history,
        planned_tokens=fixed + history_tokens,
        saved_tokens=0,  # nothing sent is nothing saved: a blocked plan is no compaction
        shared_prefix_messages=0,
        shared_prefix_tokens=0,
        diagnostics=tuple(diagnostics[:MAX_DIAGNOSTICS]),
        fallback=PlanFallback(mode=failure.mode, code=failure.code, detail=failure.detail[:200]),
    )
    return ContextPlan(
        messages=tuple(out),
        items=tuple(items),
        budget=empty,
        manifest=manifest,
        state=kept_state,
        _source=source,
        _positions=positions,
    )
