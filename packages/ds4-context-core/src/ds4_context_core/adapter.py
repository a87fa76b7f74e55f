"""The ``runtime-adapter-v1`` contract: what an agent runtime implements to plug into ds4-context.

::

    from ds4_context_core.adapter import RuntimeAdapter, CompletionRequest, negotiate_runtime_capabilities

See ``docs/core/adapter.md`` for a complete in-memory adapter that passes the conformance kit. The two
kit entry points are re-exported here for convenience; the kit itself lives in ``conformance``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from ._adapter._capabilities import (
    CAPABILITY_DIAGNOSTIC_CODES,
    CAPABILITY_REASON_MAX_CHARS,
    CAPABILITY_REGISTRY_V1,
    CAPABILITY_VERSION_PATTERN,
    RUNTIME_ADAPTER_CONTRACT_VERSION,
    CapabilityDeclaration,
    CapabilityNegotiation,
    CapabilityRequest,
    CapabilityStatus,
    RuntimeCapabilityId,
    is_valid_capability_version,
    negotiate_runtime_capabilities,
    normalize_capability_reason,
)
from ._adapter._completion import (
    FAILURE_KINDS,
    INTEROP_CONVERTERS,
    INTEROP_FORMATS,
    TRANSIENT_FAILURE_KINDS,
    CompletionFailure,
    CompletionUsage,
    FailureKind,
    InteropFormat,
    MessageConverter,
    ProviderContinuation,
    ToolDefinition,
)
from ._adapter._diagnostics import (
    ADAPTER_DIAGNOSTIC_CODES,
    ADAPTER_DIAGNOSTIC_MESSAGE_MAX_CHARS,
    ADAPTER_DIAGNOSTICS_LIMIT,
    DIAGNOSTIC_SEVERITIES,
    AdapterDiagnostic,
    DiagnosticsBuffer,
    DiagnosticSeverity,
)
from ._adapter._types import (
    COMPLETION_FALLBACK_CODES,
    COMPLETION_IDENTIFIER_MAX_CHARS,
    COMPLETION_PAYLOAD_FORMATS,
    EMBEDDING_PORT_VERSION,
    AdapterIdentity,
    CompletionCompleted,
    CompletionFallback,
    CompletionFallbackCode,
    CompletionPayloadFormat,
    CompletionRequest,
    CompletionResult,
    CompletionTransport,
    EmbeddingPort,
    LocalKvCapableRuntimeAdapter,
    RuntimeAdapter,
    complete_with_guards,
    completion_fallback,
    completion_payload,
    validate_completion_request,
)
from ._exports import adopt_public_names

if TYPE_CHECKING:
    from .conformance import assert_runtime_adapter_conformance, run_runtime_adapter_conformance

__all__ = [
    "ADAPTER_DIAGNOSTICS_LIMIT",
    "ADAPTER_DIAGNOSTIC_CODES",
    "ADAPTER_DIAGNOSTIC_MESSAGE_MAX_CHARS",
    "CAPABILITY_DIAGNOSTIC_CODES",
    "CAPABILITY_REASON_MAX_CHARS",
    "CAPABILITY_REGISTRY_V1",
    "CAPABILITY_VERSION_PATTERN",
    "COMPLETION_FALLBACK_CODES",
    "COMPLETION_IDENTIFIER_MAX_CHARS",
    "COMPLETION_PAYLOAD_FORMATS",
    "DIAGNOSTIC_SEVERITIES",
    "EMBEDDING_PORT_VERSION",
    "FAILURE_KINDS",
    "INTEROP_CONVERTERS",
    "INTEROP_FORMATS",
    "RUNTIME_ADAPTER_CONTRACT_VERSION",
    "TRANSIENT_FAILURE_KINDS",
    "AdapterDiagnostic",
    "AdapterIdentity",
    "CapabilityDeclaration",
    "CapabilityNegotiation",
    "CapabilityRequest",
    "CapabilityStatus",
    "CompletionCompleted",
    "CompletionFailure",
    "CompletionFallback",
    "CompletionFallbackCode",
    "CompletionPayloadFormat",
    "CompletionRequest",
    "CompletionResult",
    "CompletionTransport",
    "CompletionUsage",
    "DiagnosticSeverity",
    "DiagnosticsBuffer",
    "EmbeddingPort",
    "FailureKind",
    "InteropFormat",
    "LocalKvCapableRuntimeAdapter",
    "MessageConverter",
    "ProviderContinuation",
    "RuntimeAdapter",
    "RuntimeCapabilityId",
    "ToolDefinition",
    "assert_runtime_adapter_conformance",
    "complete_with_guards",
    "completion_fallback",
    "completion_payload",
    "is_valid_capability_version",
    "negotiate_runtime_capabilities",
    "normalize_capability_reason",
    "run_runtime_adapter_conformance",
    "validate_completion_request",
]

# The kit (anyio, its fixture file, temporary directories) is imported when one of its two entry points
# is first named: an adapter or a host that only needs the contract's types starts without it.
_KIT: Final = frozenset({"assert_runtime_adapter_conformance", "run_runtime_adapter_conformance"})


def __getattr__(name: str) -> Any:
    if name not in _KIT:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import conformance  # noqa: PLC0415 - see above

    value = getattr(conformance, name)
    globals()[name] = value
    return value


adopt_public_names(__name__, globals())
