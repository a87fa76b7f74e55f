"""The ``runtime-adapter-v1`` contract: identity, completion requests and results, the adapter protocol.

``complete()`` never raises for an expected failure: it returns a :class:`CompletionFallback` with a
fixed code, so a host can always fall back to its native context. ``complete()`` and ``shutdown()`` are
coroutines run by anyio, so an adapter works under asyncio and trio alike.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, Literal, Protocol, TypeAlias, runtime_checkable

import msgspec

from ._adapter_diagnostics import AdapterDiagnostic, DiagnosticsBuffer
from ._capabilities import (
    RUNTIME_ADAPTER_CONTRACT_VERSION,
    CapabilityDeclaration,
    CapabilityNegotiation,
    CapabilityRequest,
)
from ._exceptions import AdapterArgumentError, CompletionRequestError
from ._localkv import LocalKvDiagnostics, LocalKvOutcome, LocalKvRuntimePort
from ._model import ModelDescriptor, RuntimeHistorySnapshot
from ._privacy import PrivacyResult, PrivacySummary

__all__ = [
    "COMPLETION_FALLBACK_CODES",
    "COMPLETION_IDENTIFIER_MAX_CHARS",
    "EMBEDDING_PORT_VERSION",
    "AdapterIdentity",
    "CompletionCompleted",
    "CompletionFallback",
    "CompletionFallbackCode",
    "CompletionRequest",
    "CompletionResult",
    "CompletionTransport",
    "EmbeddingPort",
    "LocalKvCapableRuntimeAdapter",
    "RuntimeAdapter",
    "complete_with_guards",
    "completion_fallback",
    "validate_completion_request",
]

COMPLETION_FALLBACK_CODES: Final = (
    "adapter-closed",
    "invalid-request",
    "privacy-enforcement-failed",
    "transport-failed",
)
COMPLETION_IDENTIFIER_MAX_CHARS: Final = 256
EMBEDDING_PORT_VERSION: Final = "embedding-port-v1"
"""The ``embeddings`` capability version an adapter declares when it was given an :class:`EmbeddingPort`."""

CompletionFallbackCode: TypeAlias = Literal[
    "adapter-closed", "invalid-request", "privacy-enforcement-failed", "transport-failed"
]

_FALLBACK_REASONS: Final[dict[str, str]] = {
    "adapter-closed": "the adapter was shut down; use the native context",
    "invalid-request": "the completion request is malformed; nothing was sent",
    "privacy-enforcement-failed": "privacy enforcement failed closed; nothing was sent",
    "transport-failed": "the completion transport failed; the request may be retried",
}


class AdapterIdentity(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Which adapter this is and which contract it implements."""

    adapter_name: str
    adapter_version: str
    contract_version: str = RUNTIME_ADAPTER_CONTRACT_VERSION


class CompletionRequest(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A provider-facing request. ``payload`` is the provider payload (messages, tools, options).

    The adapter sanitizes ``payload`` for ``provider`` immediately before transport; the request object
    itself is never modified.
    """

    provider: str
    model: str
    payload: Mapping[str, Any]

    def with_payload(self, payload: Mapping[str, Any]) -> CompletionRequest:
        """The same request carrying another payload (for example the sanitized one)."""
        return CompletionRequest(provider=self.provider, model=self.model, payload=payload)


class CompletionCompleted(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    rename="camel",
    omit_defaults=True,
    tag_field="status",
    tag="completed",
):
    """The transport answered. ``privacy`` says what enforcement did, without the payload."""

    output: Any
    privacy: PrivacySummary
    local_kv: LocalKvOutcome | None = None


class CompletionFallback(
    msgspec.Struct, frozen=True, kw_only=True, rename="camel", tag_field="status", tag="fallback"
):
    """Nothing usable came back; the host continues with its native context. ``reason`` is fixed text."""

    code: CompletionFallbackCode
    reason: str
    retryable: bool


CompletionResult: TypeAlias = CompletionCompleted | CompletionFallback

CompletionTransport: TypeAlias = Callable[[CompletionRequest], Awaitable[Any]]
"""An injected provider boundary: receives the request with its *sanitized* payload, returns the output."""


def completion_fallback(code: CompletionFallbackCode) -> CompletionFallback:
    """The fallback result for ``code``, with its fixed reason; only ``transport-failed`` is retryable.

    A code outside ``COMPLETION_FALLBACK_CODES`` raises :class:`~ds4_context_core.AdapterArgumentError`
    (``completion-fallback-code-unknown``, also a ``ValueError``).
    """
    if not isinstance(code, str) or code not in _FALLBACK_REASONS:
        raise AdapterArgumentError("completion-fallback-code-unknown", "unknown completion fallback code")
    return CompletionFallback(code=code, reason=_FALLBACK_REASONS[code], retryable=code == "transport-failed")


def _valid_identifier(value: Any) -> bool:
    return (
        isinstance(value, str)
        and 0 < len(value) <= COMPLETION_IDENTIFIER_MAX_CHARS
        and value.strip() == value
        and value.isprintable()
    )


def validate_completion_request(request: Any) -> CompletionRequest:
    """Return ``request`` when it is well formed; raise :class:`CompletionRequestError` otherwise.

    Well formed: a :class:`CompletionRequest` whose provider and model are 1-256 printable characters
    without surrounding whitespace and whose payload is a mapping with string keys.
    """
    if not isinstance(request, CompletionRequest):
        raise CompletionRequestError("completion-request-invalid", "not a CompletionRequest")
    if not _valid_identifier(request.provider):
        raise CompletionRequestError(
            "completion-request-invalid", "provider id is empty, too long or unprintable"
        )
    if not _valid_identifier(request.model):
        raise CompletionRequestError(
            "completion-request-invalid", "model id is empty, too long or unprintable"
        )
    if not isinstance(request.payload, Mapping):
        raise CompletionRequestError("completion-request-invalid", "payload is not a mapping")
    return request


@runtime_checkable
class EmbeddingPort(Protocol):
    """A host-owned embedding service (``embedding-port-v1``): one vector per input text, in order.

    An adapter that is given one declares the ``embeddings`` capability as supported with version
    :data:`EMBEDDING_PORT_VERSION`; whoever calls ``embed`` enforces privacy on the texts first.
    """

    async def embed(self, texts: Sequence[str]) -> Sequence[Sequence[float]]:
        """Embed ``texts`` (already privacy-enforced by the caller)."""
        ...


@runtime_checkable
class RuntimeAdapter(Protocol):
    """The ``runtime-adapter-v1`` boundary between ds4-context and an agent runtime.

    Rules every implementation keeps (the conformance kit checks them):

    * ``snapshot_history`` projects canonical history read-only and never invents, reorders or repairs
      it; an invalid, corrupt, identity-mismatched or untrusted source is rejected.
    * ``rebuild_derived_state`` discards only derived caches; the next snapshot equals the previous one.
    * ``enforce_privacy`` runs immediately before transport and raises on any failure; ``complete`` then
      returns the ``privacy-enforcement-failed`` fallback and never calls the transport.
    * ``complete`` returns a :class:`CompletionFallback` instead of raising.
    * ``diagnostics`` is bounded and metadata-only.
    * ``shutdown`` is idempotent; afterwards ``complete`` returns ``adapter-closed`` and
      ``snapshot_history`` raises :class:`~ds4_context_core.AdapterClosedError`.
    """

    @property
    def identity(self) -> AdapterIdentity:
        """Adapter name and version and the contract version."""
        ...

    def snapshot_history(self) -> RuntimeHistorySnapshot:
        """The current canonical history as a validated ``runtime-history-v1`` snapshot."""
        ...

    def rebuild_derived_state(self) -> None:
        """Discard derived state and replay it from canonical history."""
        ...

    def current_model(self) -> ModelDescriptor | None:
        """The selected model's limits, or None when no model is selected."""
        ...

    def trusted_project_root(self) -> str:
        """The runtime-approved canonical project root (a real path)."""
        ...

    def enforce_privacy(self, request: CompletionRequest) -> PrivacyResult:
        """Sanitize ``request.payload`` for ``request.provider``; raise ``PrivacyEnforcementError`` if not."""
        ...

    async def complete(self, request: CompletionRequest) -> CompletionResult:
        """Validate, sanitize, send; an explicit fallback result for every expected failure."""
        ...

    def capability_declarations(self) -> Sequence[CapabilityDeclaration]:
        """One declaration per registry capability."""
        ...

    def negotiate_capabilities(self, requests: Sequence[CapabilityRequest]) -> CapabilityNegotiation:
        """Negotiate ``requests`` against this adapter's declarations."""
        ...

    def diagnostics(self) -> Sequence[AdapterDiagnostic]:
        """The newest diagnostics (bounded, metadata only)."""
        ...

    async def shutdown(self) -> None:
        """Release resources; calling it again does nothing."""
        ...


@runtime_checkable
class LocalKvCapableRuntimeAdapter(RuntimeAdapter, Protocol):
    """An adapter that also exposes a local KV port and its aggregate diagnostics (both optional in v1)."""

    @property
    def local_kv_port(self) -> LocalKvRuntimePort | None:
        """The injected port, or None when local KV reuse is unavailable."""
        ...

    def local_kv_diagnostics(self) -> LocalKvDiagnostics:
        """Aggregate ``local-kv-diagnostics-v1`` counters."""
        ...


async def complete_with_guards(
    request: Any,
    *,
    closed: bool,
    enforce_privacy: Callable[[CompletionRequest], PrivacyResult],
    transport: CompletionTransport,
    diagnostics: DiagnosticsBuffer,
) -> CompletionResult:
    """The standard ``complete()`` flow, for adapters that do not need their own.

    Closed -> ``adapter-closed``; malformed -> ``invalid-request``; any exception from
    ``enforce_privacy`` -> ``privacy-enforcement-failed`` without calling ``transport``; any exception from
    ``transport`` -> ``transport-failed`` (retryable). Each failure records a metadata-only diagnostic.
    """
    if closed:
        diagnostics.record("adapter-closed", "completion requested after shutdown", severity="warning")
        return completion_fallback("adapter-closed")
    try:
        valid = validate_completion_request(request)
    except CompletionRequestError:
        diagnostics.record("completion-request-invalid", "completion request rejected", severity="warning")
        return completion_fallback("invalid-request")
    try:
        privacy = enforce_privacy(valid)
    except Exception:
        diagnostics.record(
            "privacy-enforcement-failed", "privacy failed closed; nothing sent", severity="error"
        )
        return completion_fallback("privacy-enforcement-failed")
    try:
        output = await transport(valid.with_payload(privacy.payload))
    except Exception:
        diagnostics.record("completion-transport-failed", "completion transport raised", severity="warning")
        return completion_fallback("transport-failed")
    return CompletionCompleted(output=output, privacy=privacy.summary())
