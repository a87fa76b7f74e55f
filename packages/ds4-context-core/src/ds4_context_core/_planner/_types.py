"""Records the planner hands back: items, budget, manifest, receipts, fallbacks, supplements."""

from __future__ import annotations

from typing import Final, Literal, TypeAlias

import msgspec

PLAN_CONTRACT_VERSION: Final = "ds4-context-plan-v1"

FALLBACK_MODE_NATIVE: Final = "native"
FALLBACK_MODE_BLOCKED: Final = "blocked"
PLAN_FALLBACK_MODES: Final = (FALLBACK_MODE_BLOCKED, FALLBACK_MODE_NATIVE)

PLAN_FALLBACK_CODES: Final = (
    "current-request-missing",
    "destination-invalid",
    "fixed-overhead-exceeds-hard-limit",
    "fixed-tokens-invalid",
    "hard-limit-exceeded",
    "history-invalid",
    "history-message-id-duplicate",
    "message-exceeds-window",
    "pins-exceed-cap",
    "plan-validation-failed",
    "planner-error",
    "privacy-sanitizer-failed",
    "token-estimator-failed",
    "window-invalid",
    "window-too-small",
)

PLAN_ITEM_KINDS: Final = (
    "current-request",
    "interrupted-tool-call",
    "memory",
    "message",
    "pin",
    "project-snippet",
    "receipt",
    "retrieved-history",
    "summary",
    "trimmed-tool-result",
)

PLAN_INCLUSION_REASONS: Final = (
    "current-request",
    "layer-1-trimmed",
    "layer-2-receipt",
    "native-fallback",
    "persistent-pin",
    "pin-label",
    "recent-tail",
    "retained-history",
    "structure-repair",
    "supplement-priority",
)

PLAN_EXCLUSION_REASONS: Final = (
    "before-cut",
    "supplement-invalid",
    "supplement-over-budget",
    "supplement-over-ceiling",
    "tool-call-incomplete",
    "tool-result-orphaned",
)

PLAN_DIAGNOSTIC_CODES: Final = (
    "config-warning",
    "current-request-trimmed",
    "fallback-fitted",
    "judge-failed",
    "pin-incomplete-group",
    "pin-unknown",
    "state-reset",
    "structure-first-user-inserted",
    "supplement-reserve-invalid",
)

#: Id prefix of a model-written summary supplement (``summaries.summary_supplement``).
SUMMARY_ID_PREFIX: Final = "ds4-summary:"
SUPPLEMENT_KINDS: Final = ("memory", "project-snippet", "retrieved-history", "summary")

PRIORITY_CURRENT_REQUEST: Final = 1000
PRIORITY_PERSISTENT_PIN: Final = 950
PRIORITY_PIN_LABEL: Final = 900
PRIORITY_RECENT_TURN: Final = 100
PRIORITY_MEMORY: Final = 90
PRIORITY_RETRIEVED_HISTORY: Final = 85
PRIORITY_PROJECT_SNIPPET: Final = 80
PRIORITY_SUMMARY: Final = 75

SupplementKind: TypeAlias = Literal["memory", "project-snippet", "retrieved-history", "summary"]

DEFAULT_SUPPLEMENT_PRIORITY: Final[dict[str, int]] = {
    "memory": PRIORITY_MEMORY,
    "retrieved-history": PRIORITY_RETRIEVED_HISTORY,
    "project-snippet": PRIORITY_PROJECT_SNIPPET,
    "summary": PRIORITY_SUMMARY,
}


class _Record(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    pass


class SupplementalItem(_Record, frozen=True):
    """Content the caller produced (memory, retrieved history, project snippets, summaries).

    Memory and summaries are placed before the history; retrieved history and project snippets right
    before the current request, unless ``placement`` says ``"front"`` (before the history, after the
    higher-priority front items): a host that keeps an excerpt for many turns puts it there, so a new
    request does not move it and the cached prefix survives. ``source_ids`` name the canonical messages
    a summary or excerpt covers.
    """

    id: str
    kind: SupplementKind
    text: str
    priority: int | None = None
    source_ids: tuple[str, ...] = ()
    placement: Literal["front"] | None = None


class PlanItem(_Record, frozen=True):
    """Why one provider-facing message is in the plan."""

    message_id: str
    kind: str
    reason: str
    tokens: int
    priority: int
    original_index: int | None = None
    source_ids: tuple[str, ...] = ()
    group_id: str | None = None
    turn_id: str | None = None
    score: float | None = None


class PlanBudget(_Record, frozen=True):
    """Every figure the plan was measured against, in tokens."""

    context_window: int
    output_reserve: int
    safety_margin: int
    hard_limit: int
    soft_limit: int
    target_tokens: int
    calibration_ratio: float
    recent_tail_ceiling: int
    retrieved_history_ceiling: int
    project_snippet_ceiling: int
    summary_ceiling: int
    memory_ceiling: int
    pin_cap: int
    fixed_tokens: int = 0
    mandatory_tokens: int = 0
    supplemental_tokens: int = 0
    history_tokens: int = 0
    total_tokens: int = 0
    # where calibration_ratio came from: usage, prior (the provider family's), explicit, config or none
    calibration_source: str = "none"


class PlanExclusion(_Record, frozen=True):
    """Something left out of the plan. Long runs are summarised by their first and last message ids."""

    reason: str
    count: int
    tokens: int
    message_ids: tuple[str, ...] = ()
    first_message_id: str | None = None
    last_message_id: str | None = None


class ReceiptRecord(_Record, frozen=True):
    """A layer-2 receipt in the plan: which compaction made it and which originals it stands for."""

    receipt_id: str
    compaction_id: str
    original_message_ids: tuple[str, ...]
    original_tokens: int
    receipt_tokens: int


class GateCount(_Record, frozen=True):
    gate: str
    count: int


class CompactionReport(_Record, frozen=True):
    """What the compaction of this step did (or, in dry-run, would have done)."""

    compaction_id: str
    dry_run: bool
    tokens_before: int
    tokens_after: int
    goal_tokens: int
    trimmed_message_ids: tuple[str, ...] = ()
    receipt_ids: tuple[str, ...] = ()
    dropped_messages: int = 0
    dropped_supplements: tuple[str, ...] = ()
    gate_exclusions: tuple[GateCount, ...] = ()


class PlanDiagnostic(_Record, frozen=True):
    code: str
    detail: str


class PlanFallback(_Record, frozen=True):
    """The plan failed open (``native``) or closed (``blocked``: send nothing); ``code`` says why."""

    mode: str
    code: str
    detail: str


class PlanManifest(_Record, frozen=True):
    """What is in, what is out, and why."""

    contract_version: str
    history_messages: int
    included_messages: int
    native_tokens: int
    planned_tokens: int
    saved_tokens: int
    shared_prefix_messages: int
    shared_prefix_tokens: int
    exclusions: tuple[PlanExclusion, ...] = ()
    receipts: tuple[ReceiptRecord, ...] = ()
    compaction: CompactionReport | None = None
    diagnostics: tuple[PlanDiagnostic, ...] = ()
    fallback: PlanFallback | None = None
