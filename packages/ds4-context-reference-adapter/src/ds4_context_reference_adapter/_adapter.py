"""``ReferenceRuntimeAdapter``: the ``runtime-adapter-v1`` boundary over a ``ds4-runtime-session-v1`` file.

The history file is the canonical source; the adapter only keeps an in-memory projection of it (the
last snapshot), which ``rebuild_derived_state`` discards. Completion goes through a host callback
(sync or async), always behind privacy enforcement that fails closed. Local KV reuse runs only when a
port is injected *and* the host turned it on.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, TypeAlias

import anyio
import anyio.to_thread
import msgspec

from ds4_context_core import AdapterClosedError, CanonicalMessage, ModelDescriptor, RuntimeHistorySnapshot
from ds4_context_core.adapter import (
    EMBEDDING_PORT_VERSION,
    AdapterDiagnostic,
    AdapterIdentity,
    CapabilityDeclaration,
    CapabilityNegotiation,
    CapabilityRequest,
    CompletionCompleted,
    CompletionRequest,
    CompletionResult,
    DiagnosticsBuffer,
    EmbeddingPort,
    complete_with_guards,
    negotiate_runtime_capabilities,
)
from ds4_context_core.localkv import (
    LOCAL_KV_RUNTIME_PORT_VERSION,
    LocalKvDiagnostics,
    LocalKvEligibilityInput,
    LocalKvOutcome,
    LocalKvReuseController,
    LocalKvRuntimePort,
    evaluate_local_kv_eligibility,
)
from ds4_context_core.privacy import (
    PrivacyPolicy,
    PrivacyResult,
    enforce_payload_privacy,
    privacy_destination,
    privacy_policy_version,
)

from ._exceptions import ReferenceConfigError, ReferenceHistoryError
from ._jsonl import (
    AppendedRecord,
    ReferenceHistory,
    ReferenceHistoryLimits,
    _canonical_root,
    append_reference_history_message,
    read_reference_history,
    read_reference_history_header,
)
from ._version import __version__

__all__ = [
    "ADAPTER_NAME",
    "COMPACTION_UNSUPPORTED_REASON",
    "CONTINUATION_UNSUPPORTED_REASON",
    "EMBEDDINGS_UNAVAILABLE_REASON",
    "EMBEDDING_PORT_VERSION",
    "LOCAL_KV_UNAVAILABLE_REASON",
    "EmbeddingPort",
    "ReferenceCompletionTransport",
    "ReferenceLocalKvRequest",
    "ReferenceRuntimeAdapter",
]

ADAPTER_NAME: Final = "ds4-context-reference-adapter"
# EMBEDDING_PORT_VERSION and EmbeddingPort live in ds4_context_core.adapter; re-exported here unchanged.
COMPACTION_UNSUPPORTED_REASON: Final = (
    "the reference runtime has no native compaction; its JSONL history is append-only"
)
CONTINUATION_UNSUPPORTED_REASON: Final = (
    "the reference runtime keeps no provider-side conversation state to continue from"
)
EMBEDDINGS_UNAVAILABLE_REASON: Final = "no embedding port was injected into the reference adapter"
LOCAL_KV_UNAVAILABLE_REASON: Final = "no local KV runtime port was injected into the reference adapter"


ReferenceCompletionTransport: TypeAlias = Callable[[CompletionRequest], Any | Awaitable[Any]]
"""The host's provider call: gets the request with its sanitized payload, returns the provider output.

A plain function runs in a worker thread (so a blocking HTTP client cannot stall the event loop); a
coroutine function is awaited.
"""


class ReferenceLocalKvRequest(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """What local KV eligibility needs beyond the completion request (see ``local-kv-eligibility-v1``)."""

    prompt_prefix: str | bytes
    prefix_token_count: int
    context_token_count: int
    model_revision: str
    system_options: Any = None
    tool_options: Any = None


def _is_async_callable(function: object) -> bool:
    if inspect.iscoroutinefunction(function):
        return True
    call = getattr(function, "__call__", None)  # noqa: B004 - an async __call__ is what we look for
    return inspect.iscoroutinefunction(call)


class ReferenceRuntimeAdapter:
    """``runtime-adapter-v1`` over an append-only ``ds4-runtime-session-v1`` history file.

    ``transport`` is the host's provider call (sync or async). Privacy is on by default
    (``PrivacyPolicy()``) and fails closed: when it raises, the transport is not called. The optional
    ``embedding_port`` and ``local_kv_port`` each turn their capability into a supported, versioned one;
    local KV reuse additionally stays off until ``local_kv_enabled=True``.

    ``trusted_project_root`` defaults to the root recorded in the file's header (which must then be a
    canonical directory; the header is read here, so an unreadable file raises its
    ``ReferenceHistoryError`` now); ``runtime_id``/``session_id``, when given, must match the header.
    ``embedding_provider`` is the provider id privacy is enforced for before texts reach the embedding
    port: unless the privacy policy lists it as local, the remote rules apply.
    """

    def __init__(
        self,
        history_path: str | os.PathLike[str],
        *,
        transport: ReferenceCompletionTransport,
        model: ModelDescriptor | None = None,
        trusted_project_root: str | os.PathLike[str] | None = None,
        runtime_id: str | None = None,
        session_id: str | None = None,
        privacy: PrivacyPolicy | None = None,
        limits: ReferenceHistoryLimits | None = None,
        embedding_port: EmbeddingPort | None = None,
        embedding_provider: str = "embedding-port",
        local_kv_port: LocalKvRuntimePort | None = None,
        local_kv_enabled: bool = False,
    ) -> None:
        if not callable(transport):
            raise ReferenceConfigError("transport must be a callable")
        if embedding_port is not None and not isinstance(embedding_port, EmbeddingPort):
            raise ReferenceConfigError("embedding_port must have an async embed(texts) method")
        if local_kv_port is not None and not isinstance(local_kv_port, LocalKvRuntimePort):
            raise ReferenceConfigError("local_kv_port must implement try_reuse and full_replay")
        self._path = os.fspath(history_path)
        self._transport = transport
        self._transport_is_async = _is_async_callable(transport)
        self._model = model
        self._privacy = privacy if privacy is not None else PrivacyPolicy()
        self._limits = limits or ReferenceHistoryLimits()
        self._runtime_id = runtime_id
        self._session_id = session_id
        if trusted_project_root is None:
            trusted_project_root = read_reference_history_header(self._path).project_root
        self._trusted_root = _canonical_root(trusted_project_root)
        self._embedding_port = embedding_port
        self._embedding_provider = embedding_provider
        self._local_kv_port = local_kv_port
        self._local_kv_enabled = bool(local_kv_enabled)
        self._local_kv = LocalKvReuseController(local_kv_port)
        self._diagnostics = DiagnosticsBuffer()
        self._lock = threading.Lock()
        self._history: ReferenceHistory | None = None
        self._closed = False

    # -- identity, model, root ---------------------------------------------------------------------

    @property
    def identity(self) -> AdapterIdentity:
        """``ds4-context-reference-adapter`` at this package's version, ``runtime-adapter-v1``."""
        return AdapterIdentity(adapter_name=ADAPTER_NAME, adapter_version=__version__)

    @property
    def history_path(self) -> str:
        """The canonical history file this adapter projects."""
        return self._path

    def current_model(self) -> ModelDescriptor | None:
        """The model given at construction, or None."""
        return self._model

    def trusted_project_root(self) -> str:
        """The realpath of the trusted project root; the history's header must name exactly this."""
        return self._trusted_root

    # -- canonical history ---------------------------------------------------------------------------

    def snapshot_history(self) -> RuntimeHistorySnapshot:
        """Read, check and project the history file; raises on a closed adapter or a rejected file.

        An unchanged file (same bytes, same sha256) returns the previous projection without decoding.
        """
        if self._closed:
            self._diagnostics.record("adapter-closed", "history read after shutdown", severity="warning")
            raise AdapterClosedError("adapter-closed", "the adapter was shut down")
        with self._lock:
            previous = self._history
        try:
            history = read_reference_history(
                self._path,
                limits=self._limits,
                runtime_id=self._runtime_id,
                session_id=self._session_id,
                trusted_project_root=self._trusted_root,
                previous=previous,
            )
        except ReferenceHistoryError as error:
            self._diagnostics.record(error.code, f"history rejected: {error.reason}", severity="error")
            raise
        with self._lock:
            self._history = history
        return history.snapshot

    def rebuild_derived_state(self) -> None:
        """Forget the in-memory projection; the file is not touched and the next snapshot re-reads it."""
        if self._closed:
            self._diagnostics.record("adapter-closed", "rebuild after shutdown", severity="warning")
            raise AdapterClosedError("adapter-closed", "the adapter was shut down")
        with self._lock:
            self._history = None
        self._diagnostics.record("derived-state-rebuilt", "in-memory projection discarded", severity="info")

    def append_message(self, message: CanonicalMessage) -> AppendedRecord:
        """Append a runtime-native message to the canonical file (refused after shutdown)."""
        if self._closed:
            self._diagnostics.record("adapter-closed", "append after shutdown", severity="warning")
            raise AdapterClosedError("adapter-closed", "the adapter was shut down")
        return append_reference_history_message(self._path, message, limits=self._limits)

    # -- privacy and completion ----------------------------------------------------------------------

    def enforce_privacy(self, request: CompletionRequest) -> PrivacyResult:
        """Sanitize the payload for the request's provider; raises ``PrivacyEnforcementError`` on failure."""
        return enforce_payload_privacy(request.payload, provider=request.provider, policy=self._privacy)

    async def _call_transport(self, request: CompletionRequest) -> Any:
        if self._transport_is_async:
            return await self._transport(request)
        output = await anyio.to_thread.run_sync(self._transport, request)
        if inspect.isawaitable(output):
            output = await output
        return output

    async def complete(
        self, request: CompletionRequest, *, local_kv: ReferenceLocalKvRequest | None = None
    ) -> CompletionResult:
        """Validate, sanitize, send. Every expected failure is a ``CompletionFallback``, never an exception.

        ``local_kv`` describes the prompt prefix for local KV reuse; without it (or with reuse off, no
        port, or a remote provider) the request goes straight to the transport.
        """
        outcome: list[LocalKvOutcome] = []

        async def send(sanitized: CompletionRequest) -> Any:
            if local_kv is None or self._local_kv_port is None or not self._local_kv_enabled:
                return await self._call_transport(sanitized)
            execution = await self._local_kv.execute(
                evaluate_local_kv_eligibility(self._eligibility_input(sanitized, local_kv)),
                sanitized.payload,
            )
            outcome.append(execution.outcome)
            if execution.outcome.status == "bypassed":
                return await self._call_transport(sanitized)
            if execution.outcome.failed:
                self._diagnostics.record(
                    "local-kv-replay-failed", "local KV full replay failed", severity="warning"
                )
                raise RuntimeError("local KV replay failed")
            return execution.output

        result = await complete_with_guards(
            request,
            closed=self._closed,
            enforce_privacy=self.enforce_privacy,
            transport=send,
            diagnostics=self._diagnostics,
        )
        if outcome and isinstance(result, CompletionCompleted):
            return msgspec.structs.replace(result, local_kv=outcome[0])
        return result

    def _eligibility_input(
        self, request: CompletionRequest, hints: ReferenceLocalKvRequest
    ) -> LocalKvEligibilityInput:
        with self._lock:
            history = self._history
        if history is None:
            # Without a revision eligibility rejects the request, and it is simply not reused.
            with contextlib.suppress(ReferenceHistoryError, AdapterClosedError):
                self.snapshot_history()
            with self._lock:
                history = self._history
        destination = privacy_destination(request.provider, self._privacy)
        return LocalKvEligibilityInput(
            enabled=self._local_kv_enabled,
            capability_enabled=self._local_kv_port is not None,
            capability_version=LOCAL_KV_RUNTIME_PORT_VERSION if self._local_kv_port is not None else None,
            destination=destination,
            runtime_id=history.header.runtime_id if history is not None else "",
            runtime_revision=history.revision if history is not None else "",
            provider=request.provider,
            model=request.model,
            model_revision=hints.model_revision,
            privacy_policy_version=privacy_policy_version(self._privacy),
            prompt_prefix=hints.prompt_prefix,
            system_options=hints.system_options,
            tool_options=hints.tool_options,
            prefix_token_count=hints.prefix_token_count,
            context_token_count=hints.context_token_count,
        )

    # -- optional ports ------------------------------------------------------------------------------

    @property
    def embedding_port(self) -> EmbeddingPort | None:
        """The injected embedding port, or None."""
        return self._embedding_port

    async def embed(self, texts: Sequence[str]) -> Sequence[Sequence[float]]:
        """Embed ``texts`` through the port, after privacy enforcement for ``embedding_provider``.

        Raises ``AdapterClosedError`` after shutdown, ``ReferenceConfigError`` without a port, and
        ``PrivacyEnforcementError`` (nothing sent) when enforcement fails.
        """
        if self._closed:
            raise AdapterClosedError("adapter-closed", "the adapter was shut down")
        if self._embedding_port is None:
            raise ReferenceConfigError("no embedding port was injected")
        sanitized = enforce_payload_privacy(
            {"input": list(texts)}, provider=self._embedding_provider, policy=self._privacy
        )
        return await self._embedding_port.embed(list(sanitized.payload["input"]))

    @property
    def local_kv_port(self) -> LocalKvRuntimePort | None:
        """The injected local KV port, or None."""
        return self._local_kv_port

    def local_kv_diagnostics(self) -> LocalKvDiagnostics:
        """``local-kv-diagnostics-v1`` counters (all zero without a port)."""
        return self._local_kv.diagnostics()

    # -- capabilities, diagnostics, lifecycle --------------------------------------------------------

    def capability_declarations(self) -> Sequence[CapabilityDeclaration]:
        """All four registry capabilities: compaction and continuation never; the ports when injected."""
        embeddings = (
            CapabilityDeclaration(id="embeddings", supported=True, version=EMBEDDING_PORT_VERSION)
            if self._embedding_port is not None
            else CapabilityDeclaration(id="embeddings", supported=False, reason=EMBEDDINGS_UNAVAILABLE_REASON)
        )
        local_kv = (
            CapabilityDeclaration(id="local-kv-reuse", supported=True, version=LOCAL_KV_RUNTIME_PORT_VERSION)
            if self._local_kv_port is not None
            else CapabilityDeclaration(
                id="local-kv-reuse", supported=False, reason=LOCAL_KV_UNAVAILABLE_REASON
            )
        )
        return (
            CapabilityDeclaration(id="compaction", supported=False, reason=COMPACTION_UNSUPPORTED_REASON),
            CapabilityDeclaration(
                id="provider-continuation", supported=False, reason=CONTINUATION_UNSUPPORTED_REASON
            ),
            embeddings,
            local_kv,
        )

    def negotiate_capabilities(self, requests: Sequence[CapabilityRequest]) -> CapabilityNegotiation:
        """Negotiate against this adapter's declarations; refusals are also kept as diagnostics."""
        negotiation = negotiate_runtime_capabilities(self.capability_declarations(), requests)
        self._diagnostics.extend(list(negotiation.diagnostics))
        return negotiation

    def diagnostics(self) -> Sequence[AdapterDiagnostic]:
        """The newest 100 diagnostics, oldest first; codes and fixed text only."""
        return self._diagnostics.snapshot()

    @property
    def closed(self) -> bool:
        """Whether ``shutdown`` has run."""
        return self._closed

    async def shutdown(self) -> None:
        """Release the local KV port once; later calls do nothing. The history file is left as it is."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._history = None
        if not await self._local_kv.shutdown():
            self._diagnostics.record(
                "local-kv-shutdown-failed", "local KV port shutdown raised", severity="warning"
            )
