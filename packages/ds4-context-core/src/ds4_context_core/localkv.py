"""Local KV prefix reuse: ``local-kv-eligibility-v1`` fingerprints, the handle-free port, the controller.

::

    from ds4_context_core.localkv import LocalKvEligibilityInput, evaluate_local_kv_eligibility

See ``docs/core/localkv.md``.
"""

from __future__ import annotations

from ._exports import adopt_public_names
from ._localkv._controller import (
    LOCAL_KV_DIAGNOSTICS_VERSION,
    LOCAL_KV_ELIGIBILITY_VERSION,
    LOCAL_KV_MAX_COUNTER,
    LOCAL_KV_OUTCOME_STATUSES,
    LOCAL_KV_REJECTION_CODES,
    LOCAL_KV_RUNTIME_PORT_VERSION,
    LocalKvDiagnostics,
    LocalKvEligibility,
    LocalKvEligibilityInput,
    LocalKvExecution,
    LocalKvHashes,
    LocalKvHit,
    LocalKvMiss,
    LocalKvOutcome,
    LocalKvRejected,
    LocalKvReplayResult,
    LocalKvReuseController,
    LocalKvReuseRequest,
    LocalKvReuseResult,
    LocalKvRuntimePort,
    LocalKvUnavailable,
    evaluate_local_kv_eligibility,
)

__all__ = [
    "LOCAL_KV_DIAGNOSTICS_VERSION",
    "LOCAL_KV_ELIGIBILITY_VERSION",
    "LOCAL_KV_MAX_COUNTER",
    "LOCAL_KV_OUTCOME_STATUSES",
    "LOCAL_KV_REJECTION_CODES",
    "LOCAL_KV_RUNTIME_PORT_VERSION",
    "LocalKvDiagnostics",
    "LocalKvEligibility",
    "LocalKvEligibilityInput",
    "LocalKvExecution",
    "LocalKvHashes",
    "LocalKvHit",
    "LocalKvMiss",
    "LocalKvOutcome",
    "LocalKvRejected",
    "LocalKvReplayResult",
    "LocalKvReuseController",
    "LocalKvReuseRequest",
    "LocalKvReuseResult",
    "LocalKvRuntimePort",
    "LocalKvUnavailable",
    "evaluate_local_kv_eligibility",
]

adopt_public_names(__name__, globals())
