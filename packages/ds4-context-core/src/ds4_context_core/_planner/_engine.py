"""The planner's entry points and its pipeline of stages over one decisions record.

``plan_context`` syncs the history index (``_index``), computes the budget (``_budget``) and runs
:func:`plan_indexed`, which hands one :class:`~._decisions.Decisions` value through the stages:
adopt the previous state (``_state``), mandatory items (``_mandatory``), supplements (``_supplements``),
the compaction window (``_window``, which runs layer 1 ``_trim`` and layer 2 ``_receipts`` with the
judge's ``_verdicts``), emit (``_emit``), self-validation (``_validate``) and the manifest
(``_manifest``). Any :class:`~._decisions.FallbackError` becomes a fallback plan (``_fallback``).

Cache stability comes from four sticky decisions kept in :class:`PlanState`: a *cut* (everything
before it is out, except mandatory items), trimmed results, receipts and a *fixed head* (the oldest
units kept, sent first). The first three change only in a *compaction*, which happens when the plan
would pass the soft limit and then frees at least a batch of tokens at once, so between compactions
every plan extends the previous one byte for byte; the head survives compactions too (the cut moves
after it), so at a compaction the plan still shares the head with the previous one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, cast

import msgspec

from ds4_context_core._config_defaults import DEFAULT_CONFIG_RESULT
from ds4_context_core._history._model import CanonicalMessage, ModelDescriptor, RuntimeHistorySnapshot
from ds4_context_core._tokens._estimators import fast_chars_v1
from ds4_context_core.config import load_config

from ._budget import BudgetError, compute_budget
from ._decisions import Decisions, FallbackError, PlanInputs
from ._digest_stage import digest_reserve, digest_supplement, insert_digest, place_digest
from ._emit import Emitted, emit
from ._fallback import empty_budget, fallback_plan
from ._index import HistoryIndex, HistoryIndexError, MessageSanitizer, TokenEstimator, sync_index
from ._mandatory import extend_head, release_front, retain_front, retain_head, select_mandatory
from ._manifest import build_manifest, record_exclusions
from ._plan import ContextPlan, restore
from ._pruning import DefaultJudge, Judge
from ._state import PlanState, adopt_state
from ._structure import check_destination, repair_structure, structure_problem
from ._supplements import hold_reserve, release_reserve, select_supplements
from ._types import FALLBACK_MODE_BLOCKED, FALLBACK_MODE_NATIVE, PlanBudget, PlanDiagnostic, SupplementalItem
from ._validate import atomicity_problem
from ._window import compact_after_head, open_window, skip_far_history

if TYPE_CHECKING:
    from ds4_context_core.config import Ds4ContextConfig

__all__ = ["ContextPlan", "ContextPlanner", "PlanState", "plan_context", "restore"]

# A plan without a configuration reads the defaults from plain structs equal to the validated model, so it
# never imports pydantic (see ds4_context_core._config_defaults).
_DEFAULT_CONFIG: Final = DEFAULT_CONFIG_RESULT


def _as_messages(history: object) -> tuple[Any, ...]:
    if isinstance(history, RuntimeHistorySnapshot):
        return history.messages
    if isinstance(history, tuple):
        return history
    if isinstance(history, Sequence) and not isinstance(history, str | bytes | bytearray):
        return tuple(history)
    raise FallbackError("history-invalid", "history must be a snapshot or a sequence of canonical messages")


def plan_context(
    history: RuntimeHistorySnapshot | Sequence[CanonicalMessage],
    *,
    model: ModelDescriptor,
    fixed_tokens: int = 0,
    config: Ds4ContextConfig | Mapping[str, Any] | None = None,
    state: PlanState | None = None,
    pins: Iterable[str] = (),
    supplemental: Iterable[SupplementalItem] = (),
    estimator: TokenEstimator | None = None,
    sanitizer: MessageSanitizer | None = None,
    judge: Judge | None = None,
    calibration_ratio: float | None = None,
    destination: str | None = None,
    task_digest: bool | None = None,
    supplement_reserve: int = 0,
) -> ContextPlan:
    """Plan the context of one model call. Never raises: problems give a fallback plan with a code.

    ``destination`` (``"anthropic"``, ``"openai-chat"``, ``"openai-responses"``) names the wire format
    the host sends the plan in; the plan is repaired and checked against that provider's rules.
    ``task_digest`` overrides ``planner.task_digest`` for this call: a host that supplies its own digest
    among ``supplemental`` passes ``False`` instead of building a configuration to say so.
    ``supplement_reserve`` (tokens) counts the ``supplemental`` items as at least that much when the
    plan decides whether and how far to compact: a host that rebuilds them for the cut a compaction
    chose passes what the ones it planned with took, so smaller rebuilt ones give the same cut.
    """
    loaded = _DEFAULT_CONFIG if config is None else load_config(config)
    resolved: Ds4ContextConfig = loaded.config
    if task_digest is not None and resolved.planner.task_digest != bool(task_digest):
        resolved = _with_task_digest(resolved, bool(task_digest))
    diagnostics = [
        PlanDiagnostic(code="config-warning", detail=f"{warning.code} at {warning.path}")
        for warning in loaded.warnings
    ]
    use_estimator: TokenEstimator = estimator if estimator is not None else fast_chars_v1
    reserve = supplement_reserve
    if type(reserve) is not int or reserve < 0:
        diagnostics.append(
            PlanDiagnostic(
                code="supplement-reserve-invalid",
                detail="supplement_reserve must be a non-negative integer; planned without a reserve",
            )
        )
        reserve = 0
    index: HistoryIndex | None = None
    messages: tuple[Any, ...] = ()
    wire: str | None = None
    try:
        messages = _as_messages(history)
        wire = check_destination(destination)
        prior = state.index if isinstance(state, PlanState) else None
        lock = prior.lock if prior is not None else contextlib.nullcontext()
        with lock:
            try:
                index = sync_index(prior, messages, use_estimator, sanitizer)
            except HistoryIndexError as problem:
                mode = (
                    FALLBACK_MODE_BLOCKED
                    if problem.code == "privacy-sanitizer-failed"
                    else FALLBACK_MODE_NATIVE
                )
                raise FallbackError(problem.code, problem.detail, mode) from None
            try:
                budget = compute_budget(
                    model, fixed_tokens, resolved.budget, resolved.planner, calibration_ratio
                )
            except BudgetError as problem:
                raise FallbackError(problem.code, problem.detail) from None
            if index.duplicate_id is not None:
                raise FallbackError("history-message-id-duplicate", "two canonical messages share one id")
            inputs = PlanInputs(
                index=index,
                messages=messages,
                size=len(messages),
                budget=budget,
                config=resolved,
                pruning=resolved.pruning,
                estimator=use_estimator,
                judge=judge
                if judge is not None
                else DefaultJudge(
                    read_only_tools=resolved.pruning.read_only_tools, write_tools=resolved.pruning.write_tools
                ),
                pins=pins,
                supplemental=supplemental,
                diagnostics=diagnostics,
                destination=wire,
                supplement_reserve=reserve,
            )
            return plan_indexed(inputs, state if isinstance(state, PlanState) else None)
    except FallbackError as error:
        failure = error
    except Exception as error:
        failure = FallbackError("planner-error", type(error).__name__)
    return fallback_plan(
        failure,
        index,
        messages=messages,
        model=model,
        fixed_tokens=fixed_tokens,
        state=state,
        diagnostics=diagnostics,
        budget=_budget_or_none(model, fixed_tokens, resolved, calibration_ratio),
        destination=wire,
    )


def _with_task_digest(config: Ds4ContextConfig, enabled: bool) -> Ds4ContextConfig:
    """``config`` with ``planner.task_digest`` set: the plain defaults' structs or the validated model."""
    if isinstance(config, msgspec.Struct):  # the defaults of _config_defaults, which never load pydantic
        plain: Any = config
        replaced: Any = msgspec.structs.replace(
            plain, planner=msgspec.structs.replace(plain.planner, task_digest=enabled)
        )
        return cast("Ds4ContextConfig", replaced)
    return config.model_copy(update={"planner": config.planner.model_copy(update={"task_digest": enabled})})


def _budget_or_none(
    model: object, fixed_tokens: object, config: Ds4ContextConfig, calibration_ratio: float | None
) -> PlanBudget | None:
    """The call's budget for a fallback to fit, or ``None`` when it cannot be computed.

    Unusable fixed tokens are fitted as zero (the window is still known); a window that leaves no room
    (0, 1, 100, a reserve above it) gets a budget whose hard limit is 0, so that nothing is sent.
    """
    for fixed in (fixed_tokens, 0):
        try:
            return compute_budget(model, fixed, config.budget, config.planner, calibration_ratio)
        except BudgetError as problem:
            if problem.code in ("window-invalid", "window-too-small"):
                return _no_room(model)
        except Exception:  # an argument compute_budget cannot even look at
            return None
    return None


def _no_room(model: object) -> PlanBudget | None:
    """A budget that fits nothing, for a model whose window is a known int; else ``None``."""
    window = model.context_window if isinstance(model, ModelDescriptor) else None
    if type(window) is not int:
        return None
    return empty_budget(model, 0)


def plan_indexed(inputs: PlanInputs, state: PlanState | None) -> ContextPlan:
    """The stages of one plan, in order, over one decisions record."""
    index = inputs.index
    decisions = adopt_state(state, inputs)
    mandatory = select_mandatory(inputs, decisions)
    retain_head(inputs, decisions, mandatory)
    retained = retain_front(inputs, decisions, mandatory)
    current = index.current_request()
    assert current is not None  # select_mandatory raised otherwise
    supplements = select_supplements(inputs, decisions, index.view[current])
    host_tokens = sum(supplement.tokens for supplement in supplements)
    extend_head(inputs, decisions, mandatory)
    jumped = skip_far_history(inputs, decisions)
    digest = digest_supplement(inputs, decisions)
    if digest is not None:
        insert_digest(supplements, digest)
    window = open_window(inputs, decisions, mandatory, supplements)
    hold_reserve(inputs, window, host_tokens)
    if window.usage > inputs.budget.soft_limit or jumped:
        # The compaction works around the digest as around a mandatory item (it is bounded, and a
        # digest that changed would cost the whole cached prefix), with room for the digest of the cut
        # it moves, so the next plan still fits.
        held = digest.tokens if digest is not None else 0
        room = max(0, digest_reserve(inputs) - held)
        if digest is not None:
            window.supplements.remove(digest)
        window.usage += room - release_front(inputs, mandatory, retained)
        cut = decisions.cut
        compact_after_head(inputs, decisions, window, mandatory, jumped)
        release_reserve(window)
        window.usage -= room + held
        if digest is not None and decisions.cut == cut and window.usage + held <= inputs.budget.hard_limit:
            place_digest(window, digest)
        else:  # within whatever room the hard limit leaves
            room = inputs.budget.hard_limit - window.usage
            place_digest(window, digest_supplement(inputs, decisions, room))
    release_reserve(window)
    if decisions.cut > 0 and _all_sent_before_cut(inputs, decisions, mandatory):
        place_digest(window, None)  # it would only repeat what the plan sends verbatim
    if decisions.compaction is not None and decisions.compaction.tokens_after != window.usage:
        # the compaction counted room for the digest; what the plan holds is what it placed
        decisions.compaction = msgspec.structs.replace(decisions.compaction, tokens_after=window.usage)
    if window.usage > inputs.budget.hard_limit:
        raise FallbackError("hard-limit-exceeded", "mandatory items and fixed overhead do not fit")
    tail = decisions.tail_start(window.units, inputs.budget.recent_tail_ceiling)
    decisions.tail_root = window.units[tail] if tail < len(window.units) else inputs.size
    emitted = emit(inputs, decisions, window, mandatory)
    repair_structure(inputs, emitted, inputs.destination)
    record_exclusions(inputs, decisions, mandatory, window.stragglers)
    plan_messages = tuple(emitted.messages)
    total = _validated_total(inputs, decisions, emitted, plan_messages)
    manifest = build_manifest(
        inputs,
        decisions,
        emitted,
        planned_tokens=total,
        previous_messages=state.previous_messages if state is not None else (),
    )
    budget = msgspec.structs.replace(
        inputs.budget,
        mandatory_tokens=emitted.mandatory_tokens,
        supplemental_tokens=emitted.supplement_tokens,
        history_tokens=emitted.history_tokens,
        total_tokens=total,
    )
    head = decisions.head
    new_state = PlanState(
        index=index,
        source=inputs.messages,
        cut=decisions.cut,
        trims=decisions.trims,
        receipts=decisions.receipts,
        compactions=decisions.compactions,
        previous_messages=plan_messages,
        estimator=inputs.estimator,
        digest=decisions.digest,
        front=tuple(sorted(root for root in mandatory if root < decisions.cut and root not in head)),
        head=head,
        head_tokens=decisions.head_tokens,
    )
    return ContextPlan(
        messages=plan_messages,
        items=tuple(emitted.items),
        budget=budget,
        manifest=manifest,
        state=new_state,
        _restore=emitted.restore,
        _source=inputs.messages,
        _positions=index.position_of,
    )


def _all_sent_before_cut(inputs: PlanInputs, decisions: Decisions, mandatory: Mapping[int, object]) -> bool:
    """Whether every message before the cut is in a mandatory unit, which the plan sends verbatim."""
    cut, members_of = decisions.cut, inputs.index.unit_members
    kept = sum(1 for root in mandatory if root < cut for p in members_of(root) if p < cut)
    return kept >= cut


def _validated_total(
    inputs: PlanInputs, decisions: Decisions, emitted: Emitted, plan_messages: tuple[CanonicalMessage, ...]
) -> int:
    """The plan's tokens, after its self-check: tool groups whole, the current request in, within limit."""
    budget: PlanBudget = inputs.budget
    total = (
        budget.fixed_tokens + emitted.mandatory_tokens + emitted.supplement_tokens + emitted.history_tokens
    )
    broken = atomicity_problem(plan_messages) or structure_problem(plan_messages, inputs.destination)
    if broken is not None:
        raise FallbackError("plan-validation-failed", broken)
    index = inputs.index
    current = index.current_request()
    if current is None:
        raise FallbackError("plan-validation-failed", "the current request is missing from the plan")
    oversized = decisions.oversized
    sent = index.view[current] if oversized is None or current != oversized.position else oversized.message
    if not any(message is sent for message in plan_messages):
        raise FallbackError("plan-validation-failed", "the current request is missing from the plan")
    if total > budget.hard_limit:
        raise FallbackError("hard-limit-exceeded", "the plan exceeds the hard limit")
    return total


class ContextPlanner:
    """A reusable planner that carries its own :class:`PlanState` from one call to the next.

    Use one planner per conversation (branch). Calls on one planner are meant to be sequential, as the
    turns of a conversation are; the state it hands from call to call is safe to share across threads.
    """

    def __init__(
        self,
        *,
        config: Ds4ContextConfig | Mapping[str, Any] | None = None,
        estimator: TokenEstimator | None = None,
        sanitizer: MessageSanitizer | None = None,
        judge: Judge | None = None,
    ) -> None:
        loaded = load_config(config)
        self._config: Ds4ContextConfig = loaded.config
        self.config_warnings = loaded.warnings
        self._estimator = estimator
        self._sanitizer = sanitizer
        self._judge = judge
        self._state: PlanState | None = None

    @property
    def config(self) -> Ds4ContextConfig:
        return self._config

    @property
    def state(self) -> PlanState | None:
        return self._state

    def reset(self) -> None:
        """Forget sticky decisions (for example after the host switched branches)."""
        self._state = None

    def plan(
        self,
        history: RuntimeHistorySnapshot | Sequence[CanonicalMessage],
        *,
        model: ModelDescriptor,
        fixed_tokens: int = 0,
        pins: Iterable[str] = (),
        supplemental: Iterable[SupplementalItem] = (),
        calibration_ratio: float | None = None,
        destination: str | None = None,
        supplement_reserve: int = 0,
    ) -> ContextPlan:
        plan = plan_context(
            history,
            model=model,
            fixed_tokens=fixed_tokens,
            config=self._config,
            state=self._state,
            pins=pins,
            supplemental=supplemental,
            estimator=self._estimator,
            sanitizer=self._sanitizer,
            judge=self._judge,
            calibration_ratio=calibration_ratio,
            destination=destination,
            supplement_reserve=supplement_reserve,
        )
        self._state = plan.state
        return plan
