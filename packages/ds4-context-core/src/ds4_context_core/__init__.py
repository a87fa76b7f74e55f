"""ds4-context-core: canonical agent history, tool atomicity and the runtime-adapter-v1 contract.

Public names live here and in the small public modules (``ds4_context_core.adapter`` and friends);
everything prefixed with an underscore is private implementation.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from ._exceptions import (
    AdapterArgumentError,
    AdapterClosedError,
    CompletionRequestError,
    ConformanceError,
    ConformanceTargetError,
    ConformanceTransportError,
    Ds4ContextError,
    HistoryDecodeError,
    HistoryError,
    HistoryRecordError,
    HistoryValidationError,
    InteropFormatError,
    MissingExtraError,
    PlanRestoreError,
    PrivacyEnforcementError,
    PrivacyPolicyError,
    StableJsonError,
    SummaryInputError,
    TokenEstimateError,
)
from ._exports import adopt_public_names
from ._history._groups import build_canonical_tool_atomic_groups
from ._history._model import (
    HISTORY_SCHEMA_VERSION,
    ArtifactReferenceBlock,
    CanonicalBlock,
    CanonicalMessage,
    FileReferenceBlock,
    ImageBlock,
    MessageFlags,
    ModelCost,
    ModelDescriptor,
    OpaqueProviderBlock,
    Provenance,
    RuntimeHistorySnapshot,
    RuntimeToolAtomicGroup,
    SummaryReferenceBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from ._history._stable_json import sha256_hex, stable_hash, stable_json
from ._tokens._estimators import estimate_message_tokens
from ._version import __version__
from .history import (
    HistoryValidationIssue,
    assert_valid_runtime_history_snapshot,
    build_runtime_history_snapshot,
    validate_runtime_history_snapshot,
)

if TYPE_CHECKING:
    from .config import Ds4ContextConfig, load_config
    from .planner import ContextPlan, ContextPlanner, PlanState, plan_context, restore

# The planner and configuration pull in pydantic; import them on first use so that adapters and hosts that
# only need the history model start fast.
_LAZY_EXPORTS = {
    "ContextPlan": "planner",
    "ContextPlanner": "planner",
    "PlanState": "planner",
    "plan_context": "planner",
    "restore": "planner",
    "Ds4ContextConfig": "config",
    "load_config": "config",
}


def __getattr__(name: str) -> Any:
    module = _LAZY_EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "HISTORY_SCHEMA_VERSION",
    "AdapterArgumentError",
    "AdapterClosedError",
    "ArtifactReferenceBlock",
    "CanonicalBlock",
    "CanonicalMessage",
    "CompletionRequestError",
    "ConformanceError",
    "ConformanceTargetError",
    "ConformanceTransportError",
    "ContextPlan",
    "ContextPlanner",
    "Ds4ContextConfig",
    "Ds4ContextError",
    "FileReferenceBlock",
    "HistoryDecodeError",
    "HistoryError",
    "HistoryRecordError",
    "HistoryValidationError",
    "HistoryValidationIssue",
    "ImageBlock",
    "InteropFormatError",
    "MessageFlags",
    "MissingExtraError",
    "ModelCost",
    "ModelDescriptor",
    "OpaqueProviderBlock",
    "PlanRestoreError",
    "PlanState",
    "PrivacyEnforcementError",
    "PrivacyPolicyError",
    "Provenance",
    "RuntimeHistorySnapshot",
    "RuntimeToolAtomicGroup",
    "StableJsonError",
    "SummaryInputError",
    "SummaryReferenceBlock",
    "TextBlock",
    "ThinkingBlock",
    "TokenEstimateError",
    "ToolCallBlock",
    "ToolResultBlock",
    "__version__",
    "assert_valid_runtime_history_snapshot",
    "build_canonical_tool_atomic_groups",
    "build_runtime_history_snapshot",
    "estimate_message_tokens",
    "load_config",
    "plan_context",
    "restore",
    "sha256_hex",
    "stable_hash",
    "stable_json",
    "validate_runtime_history_snapshot",
]

adopt_public_names(__name__, globals())
