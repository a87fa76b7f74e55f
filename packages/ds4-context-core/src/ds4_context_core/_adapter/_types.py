"""The ``runtime-adapter-v1`` contract: identity, completion requests and results, the adapter protocol.

``complete()`` never raises for an expected failure: it returns a :class:`CompletionFallback` with a
fixed code, so a host can always fall back to its native context. ``complete()`` and ``shutdown()`` are
coroutines run by anyio, so an adapter works under asyncio and trio alike.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, TypeAlias, runtime_checkable

import msgspec

from ds4_context_core._exceptions import AdapterArgumentError, CompletionRequestError
from ds4_context_core._history._model import CanonicalMessage, ModelDescriptor, RuntimeHistorySnapshot
from ds4_context_core._localkv._controller import LocalKvDiagnostics, LocalKvOutcome, LocalKvRuntimePort
from ds4_context_core._privacy._local_only import mark_local_only_messages
from ds4_context_core._privacy._policy import PrivacyResult, PrivacySummary

from ._capabilities import (
    RUNTIME_ADAPTER_CONTRACT_VERSION,
    CapabilityDeclaration,
    CapabilityNegotiation,
    CapabilityRequest,
)
from ._completion import (
    INTEROP_CONVERTERS,
    CompletionFailure,
    CompletionUsage,
    ProviderContinuation,
    ToolDefinition,
)
from ._diagnostics import AdapterDiagnostic, DiagnosticsBuffer

if TYPE_CHECKING:  # the planner pulls in pydantic; ``from_plan`` imports it only when called
    from ds4_context_core.planner import ContextPlan

__all__ = [
    "COMPLETION_FALLBACK_CODES",
    "COMPLETION_IDENTIFIER_MAX_CHARS",
    "COMPLETION_PAYLOAD_FORMATS",
    "EMBEDDING_PORT_VERSION",
    "AdapterIdentity",
    "CompletionCompleted",
    "CompletionFallback",
    "CompletionFallbackCode",
    "CompletionPayloadFormat",
    "CompletionRequest",
    "CompletionResult",
    "CompletionTransport",
    "EmbeddingPort",
    "LocalKvCapableRuntimeAdapter",
    "RuntimeAdapter",
    "complete_with_guards",
    "completion_fallback",
    "completion_payload",
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

COMPLETION_PAYLOAD_FORMATS: Final = ("canonical", "openai-chat", "openai-responses", "anthropic")
CompletionPayloadFormat: TypeAlias = Literal["canonical", "openai-chat", "openai-responses", "anthropic"]
"""How ``CompletionRequest.from_plan`` writes a plan's messages into the payload."""

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


class CompletionRequest(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """The one provider-facing request, for an adapter's ``complete()`` and the engine's transports alike.

    It carries the conversation in one of two forms:

    * ``payload``: a provider payload the sender built itself (messages, tools, options), for example with
      :meth:`from_plan`. An adapter sanitizes it for ``provider`` immediately before transport.
    * ``messages``: the plan's provider-facing canonical messages with ``system``, ``tools`` and limits,
      for a transport that converts them into its own wire format (:meth:`from_messages`); privacy then
      runs on the converted payload, immediately before sending.

    ``model_descriptor`` holds the model's limits (a transport may read ``max_tokens``);
    ``stable_prefix_count`` is how many leading messages the plan keeps byte-identical on the next call
    (prompt-cache breakpoints go there); ``continuation`` is the one a previous completed result returned.
    The request object itself is never modified.
    """

    provider: str
    model: str
    payload: Mapping[str, Any] = msgspec.field(default_factory=dict)
    messages: tuple[CanonicalMessage, ...] = ()
    model_descriptor: ModelDescriptor | None = None
    system: str | None = None
    tools: tuple[ToolDefinition, ...] = ()
    max_output_tokens: int | None = None
    temperature: float | None = None
    stable_prefix_count: int = 0
    estimated_input_tokens: int | None = None
    continuation: ProviderContinuation | None = None

    def with_payload(self, payload: Mapping[str, Any]) -> CompletionRequest:
        """The same request carrying another payload (for example the sanitized one)."""
        return msgspec.structs.replace(self, payload=payload)

    @classmethod
    def from_messages(
        cls,
        messages: Sequence[CanonicalMessage],
        *,
        model: ModelDescriptor,
        system: str | None = None,
        tools: Sequence[ToolDefinition] = (),
        max_output_tokens: int | None = None,
        temperature: float | None = None,
        stable_prefix_count: int = 0,
        estimated_input_tokens: int | None = None,
        continuation: ProviderContinuation | None = None,
    ) -> CompletionRequest:
        """A request carrying canonical ``messages`` for a transport that converts them itself.

        ``provider`` and ``model`` come from the descriptor, which the request keeps as its limits.
        """
        if not isinstance(model, ModelDescriptor):
            raise CompletionRequestError("completion-request-invalid", "model must be a ModelDescriptor")
        return cls(
            provider=model.provider,
            model=model.id,
            messages=tuple(messages),
            model_descriptor=model,
            system=system,
            tools=tuple(tools),
            max_output_tokens=max_output_tokens,
            temperature=temperature,
            stable_prefix_count=stable_prefix_count,
            estimated_input_tokens=estimated_input_tokens,
            continuation=continuation,
        )

    @classmethod
    def from_plan(
        cls,
        plan: ContextPlan,
        *,
        model: ModelDescriptor | str | None,
        provider: str | None = None,
        payload_format: CompletionPayloadFormat = "canonical",
        extra: Mapping[str, Any] | None = None,
        native_fallback: bool = False,
    ) -> CompletionRequest:
        """The request for a plan's provider-facing messages (``plan.messages``, in order).

        ``model`` is a :class:`~ds4_context_core.ModelDescriptor` (``adapter.current_model()``; its
        ``provider`` is the default for ``provider``) or a model id (then ``provider`` is required).
        ``payload_format`` picks the message shape: ``canonical`` gives ``{"messages": [<canonical message
        as JSON builtins>, ...]}``; ``openai-chat`` ``{"messages": [...]}``, ``openai-responses``
        ``{"input": [...]}`` and ``anthropic`` ``{"system"?: ..., "messages": [...]}`` use
        ``ds4_context_core.interop`` (whose ``InteropFormatError`` propagates). ``extra`` adds other
        top-level keys (tools, options); it may not repeat a key the messages use. Privacy is not
        enforced here: ``complete()`` does that right before transport.

        A fallback plan (``plan.ok`` false) raises :class:`~ds4_context_core.CompletionRequestError`:
        ``completion-plan-blocked`` for mode ``blocked`` (send nothing, ever), ``completion-plan-fallback``
        for mode ``native``, unless ``native_fallback=True``: then its messages (the native context,
        complete tool groups only) are sent as they are, if there are any. A malformed argument (not a
        plan, no model, bad ids, unknown format, colliding key) raises it with ``completion-request-invalid``.
        """
        from ds4_context_core.planner import ContextPlan  # noqa: PLC0415 - pydantic only when a plan is at hand

        if not isinstance(plan, ContextPlan):
            raise CompletionRequestError("completion-request-invalid", "not a ContextPlan")
        fallback = plan.fallback
        if fallback is not None:
            if fallback.mode == "blocked":
                raise CompletionRequestError(
                    "completion-plan-blocked",
                    f"the plan failed closed ({fallback.code[:64]}); nothing may be sent",
                )
            if not native_fallback or not plan.messages:
                raise CompletionRequestError(
                    "completion-plan-fallback",
                    f"the plan fell back to the native context ({fallback.code[:64]}); "
                    "use the host's native context or pass native_fallback=True",
                )
        if isinstance(model, ModelDescriptor):
            model_id: Any = model.id
            provider = model.provider if provider is None else provider
        elif model is None:
            raise CompletionRequestError("completion-request-invalid", "no model selected")
        else:
            model_id = model
        if provider is None:
            raise CompletionRequestError("completion-request-invalid", "provider id is missing")
        payload = completion_payload(plan.messages, payload_format)
        for key, value in (extra or {}).items():
            if not isinstance(key, str) or key in payload:
                raise CompletionRequestError(
                    "completion-request-invalid",
                    "an extra payload key is not a string or repeats a message key",
                )
            payload[key] = value
        return validate_completion_request(cls(provider=provider, model=model_id, payload=payload))


class CompletionCompleted(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    rename="camel",
    omit_defaults=True,
    tag_field="status",
    tag="completed",
):
    """The transport answered. ``privacy`` says what enforcement did, without the payload.

    A transport that knows more fills in ``usage`` (the provider's token counts), ``continuation`` (what
    the provider stored, for the next request), ``continued_from`` (the stored response this call
    continued) and ``elapsed_ms``.
    """

    output: Any
    privacy: PrivacySummary
    local_kv: LocalKvOutcome | None = None
    usage: CompletionUsage | None = None
    continuation: ProviderContinuation | None = None
    continued_from: str | None = None
    elapsed_ms: float | None = None

    @property
    def status(self) -> Literal["completed"]:
        """The wire tag, readable in Python too: ``result.status == "completed"``."""
        return "completed"


class CompletionFallback(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    rename="camel",
    omit_defaults=True,
    tag_field="status",
    tag="fallback",
):
    """Nothing usable came back; the host continues with its native context. ``reason`` is fixed text.

    ``failure`` (when the sender knows it) says why in metadata only: a :class:`CompletionFailure` kind,
    a short reason, the HTTP status and ``Retry-After``; never a body or payload.
    """

    code: CompletionFallbackCode
    reason: str
    retryable: bool
    failure: CompletionFailure | None = None
    elapsed_ms: float | None = None

    @property
    def status(self) -> Literal["fallback"]:
        """The wire tag, readable in Python too: ``result.status == "fallback"``."""
        return "fallback"


CompletionResult: TypeAlias = CompletionCompleted | CompletionFallback

CompletionTransport: TypeAlias = Callable[[CompletionRequest], Awaitable[Any]]
"""An injected provider boundary: receives the request with its *sanitized* payload, returns the output."""


def completion_payload(
    messages: Sequence[CanonicalMessage], payload_format: CompletionPayloadFormat = "canonical"
) -> dict[str, Any]:
    """The payload a :class:`CompletionRequest` carries for ``messages`` in ``payload_format``.

    Local-only messages are first marked (flags do not survive into provider formats), then converted:
    ``canonical`` gives ``{"messages": [<JSON builtins>, ...]}``; the provider formats go through
    ``INTEROP_CONVERTERS``. Privacy is not enforced here: it runs right before transport. An unknown
    format raises :class:`~ds4_context_core.CompletionRequestError` (``completion-request-invalid``).
    """
    messages = mark_local_only_messages(messages)
    if payload_format == "canonical":
        return {"messages": msgspec.to_builtins(messages)}
    if payload_format == "openai-chat":
        return {"messages": INTEROP_CONVERTERS["openai-chat"](messages)}
    if payload_format == "openai-responses":
        return {"input": INTEROP_CONVERTERS["openai-responses"](messages)}
    if payload_format == "anthropic":
        return dict(INTEROP_CONVERTERS["anthropic"](messages))
    raise CompletionRequestError("completion-request-invalid", "unknown payload format")


def completion_fallback(
    code: CompletionFallbackCode,
    *,
    failure: CompletionFailure | None = None,
    elapsed_ms: float | None = None,
) -> CompletionFallback:
    """The fallback result for ``code``, with its fixed reason; only ``transport-failed`` is retryable.

    With a ``failure``, ``transport-failed`` is retryable only when the failure is transient (a timeout,
    a rate limit, a 5xx, a broken connection): another attempt would send the same bad request again.
    A code outside ``COMPLETION_FALLBACK_CODES`` raises :class:`~ds4_context_core.AdapterArgumentError`
    (``completion-fallback-code-unknown``, also a ``ValueError``).
    """
    if not isinstance(code, str) or code not in _FALLBACK_REASONS:
        raise AdapterArgumentError("completion-fallback-code-unknown", "unknown completion fallback code")
    retryable = code == "transport-failed" and (failure is None or failure.transient)
    return CompletionFallback(
        code=code, reason=_FALLBACK_REASONS[code], retryable=retryable, failure=failure, elapsed_ms=elapsed_ms
    )


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
    without surrounding whitespace, whose payload is a mapping with string keys, whose messages are
    canonical messages, and which does not carry both messages and a payload.
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
    if not isinstance(request.messages, tuple) or not all(
        isinstance(message, CanonicalMessage) for message in request.messages
    ):
        raise CompletionRequestError("completion-request-invalid", "messages are not canonical messages")
    if request.messages and request.payload:
        raise CompletionRequestError(
            "completion-request-invalid", "a request carries either messages or a payload, not both"
        )
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
