"""The context planner: one bounded, validated, cache-stable context per model call.

``plan_context(history, model=..., fixed_tokens=..., state=previous.state)`` returns a
:class:`ContextPlan`; it never raises. When a plan cannot be built it fails open to the native context
(``manifest.fallback.mode == "native"``) or, when the privacy sanitizer fails, closed (``"blocked"``:
send nothing), always with a code from ``PLAN_FALLBACK_CODES``.
"""

from __future__ import annotations

from ._exceptions import PlanRestoreError
from ._exports import adopt_public_names
from ._planner._engine import ContextPlan, ContextPlanner, PlanState, plan_context, restore
from ._planner._types import (
    FALLBACK_MODE_BLOCKED,
    FALLBACK_MODE_NATIVE,
    PLAN_CONTRACT_VERSION,
    PLAN_DIAGNOSTIC_CODES,
    PLAN_EXCLUSION_REASONS,
    PLAN_FALLBACK_CODES,
    PLAN_FALLBACK_MODES,
    PLAN_INCLUSION_REASONS,
    PLAN_ITEM_KINDS,
    PRIORITY_CURRENT_REQUEST,
    PRIORITY_MEMORY,
    PRIORITY_PERSISTENT_PIN,
    PRIORITY_PIN_LABEL,
    PRIORITY_PROJECT_SNIPPET,
    PRIORITY_RECENT_TURN,
    PRIORITY_RETRIEVED_HISTORY,
    PRIORITY_SUMMARY,
    SUPPLEMENT_KINDS,
    CompactionReport,
    GateCount,
    PlanBudget,
    PlanDiagnostic,
    PlanExclusion,
    PlanFallback,
    PlanItem,
    PlanManifest,
    ReceiptRecord,
    SupplementalItem,
)
from ._tokens._estimators import fast_chars_v1

__all__ = [
    "FALLBACK_MODE_BLOCKED",
    "FALLBACK_MODE_NATIVE",
    "PLAN_CONTRACT_VERSION",
    "PLAN_DIAGNOSTIC_CODES",
    "PLAN_EXCLUSION_REASONS",
    "PLAN_FALLBACK_CODES",
    "PLAN_FALLBACK_MODES",
    "PLAN_INCLUSION_REASONS",
    "PLAN_ITEM_KINDS",
    "PRIORITY_CURRENT_REQUEST",
    "PRIORITY_MEMORY",
    "PRIORITY_PERSISTENT_PIN",
    "PRIORITY_PIN_LABEL",
    "PRIORITY_PROJECT_SNIPPET",
    "PRIORITY_RECENT_TURN",
    "PRIORITY_RETRIEVED_HISTORY",
    "PRIORITY_SUMMARY",
    "SUPPLEMENT_KINDS",
    "CompactionReport",
    "ContextPlan",
    "ContextPlanner",
    "GateCount",
    "PlanBudget",
    "PlanDiagnostic",
    "PlanExclusion",
    "PlanFallback",
    "PlanItem",
    "PlanManifest",
    "PlanRestoreError",
    "PlanState",
    "ReceiptRecord",
    "SupplementalItem",
    "fast_chars_v1",
    "plan_context",
    "restore",
]

adopt_public_names(__name__, globals())
