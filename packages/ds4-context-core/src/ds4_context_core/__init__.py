"""ds4-context-core: canonical agent history, tool atomicity and the runtime-adapter-v1 contract.

Public names live here and in the small public modules (``ds4_context_core.adapter`` and friends);
everything prefixed with an underscore is private implementation.
"""

from ._exceptions import (
    AdapterClosedError,
    ConformanceError,
    Ds4ContextError,
    HistoryDecodeError,
    HistoryError,
    HistoryValidationError,
    MissingExtraError,
    PrivacyEnforcementError,
    StableJsonError,
)
from ._groups import build_canonical_tool_atomic_groups
from ._model import (
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
from ._stable_json import sha256_hex, stable_hash, stable_json
from ._tokens import estimate_message_tokens
from ._version import __version__

__all__ = [
    "HISTORY_SCHEMA_VERSION",
    "AdapterClosedError",
    "ArtifactReferenceBlock",
    "CanonicalBlock",
    "CanonicalMessage",
    "ConformanceError",
    "Ds4ContextError",
    "FileReferenceBlock",
    "HistoryDecodeError",
    "HistoryError",
    "HistoryValidationError",
    "ImageBlock",
    "MessageFlags",
    "MissingExtraError",
    "ModelCost",
    "ModelDescriptor",
    "OpaqueProviderBlock",
    "PrivacyEnforcementError",
    "Provenance",
    "RuntimeHistorySnapshot",
    "RuntimeToolAtomicGroup",
    "StableJsonError",
    "SummaryReferenceBlock",
    "TextBlock",
    "ThinkingBlock",
    "ToolCallBlock",
    "ToolResultBlock",
    "__version__",
    "build_canonical_tool_atomic_groups",
    "estimate_message_tokens",
    "sha256_hex",
    "stable_hash",
    "stable_json",
]
