"""``PiSessionAdapter``: the ``runtime-adapter-v1`` contract over one Pi session file.

The session file stays canonical and is only read here. The snapshot is the active branch as Pi would
send it; the revision is the sha256 of the stable JSON of ``{leafId, entries}``. The header ``cwd`` must
resolve (symlinks followed) inside a configured trusted root, or nothing is read.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final

from ds4_context_core import (
    AdapterClosedError,
    ModelDescriptor,
    RuntimeHistorySnapshot,
)
from ds4_context_core.adapter import (
    EMBEDDING_PORT_VERSION,
    AdapterDiagnostic,
    AdapterIdentity,
    CapabilityDeclaration,
    CapabilityNegotiation,
    CapabilityRequest,
    CompletionRequest,
    CompletionResult,
    CompletionTransport,
    DiagnosticsBuffer,
    EmbeddingPort,
    complete_with_guards,
    negotiate_runtime_capabilities,
)
from ds4_context_core.history import assert_valid_runtime_history_snapshot
from ds4_context_core.privacy import PrivacyPolicy, PrivacyResult, enforce_payload_privacy
from ds4_context_engine._exceptions import PiSessionError, UntrustedPathError
from ds4_context_engine._version import __version__

from ._pins import PinReplay
from ._view import PiSessionView

__all__ = [
    "PI_ADAPTER_NAME",
    "PI_COMPACTION_CAPABILITY_VERSION",
    "PI_CONTINUATION_CAPABILITY_VERSION",
    "PI_EMBEDDING_CAPABILITY_VERSION",
    "PI_LOCAL_KV_UNSUPPORTED_REASON",
    "PI_RUNTIME_ID",
    "PiSessionAdapter",
]

PI_ADAPTER_NAME: Final = "ds4-context-engine.pi"
PI_RUNTIME_ID: Final = "pi-session"
PI_COMPACTION_CAPABILITY_VERSION: Final = "pi-session-compact-v1"
PI_CONTINUATION_CAPABILITY_VERSION: Final = "pi-openai-responses-continuation-v1"
PI_EMBEDDING_CAPABILITY_VERSION: Final = EMBEDDING_PORT_VERSION
PI_LOCAL_KV_UNSUPPORTED_REASON: Final = (
    "Pi sessions run on remote or host-managed providers; no local KV port"
)
_EMBEDDING_UNSUPPORTED_REASON: Final = "no embedding port was given to the adapter"
# Issues that mean the file is damaged; a snapshot of it would silently leave content out.
_FATAL_ISSUES: Final = frozenset(
    {
        "pi-line-corrupt",
        "pi-line-too-deep",
        "pi-entry-invalid",
        "pi-entry-id-duplicate",
        "pi-parent-cycle",
        "pi-parent-dangling",
    }
)


class PiSessionAdapter:
    """A ``RuntimeAdapter`` reading one Pi session file.

    ``transport`` sends the sanitized request to the provider; ``model`` is the descriptor the planner
    budgets against (``None``: no model selected). ``embedding_port`` (a core
    :class:`~ds4_context_core.adapter.EmbeddingPort`) only switches the ``embeddings`` capability on, at
    ``EMBEDDING_PORT_VERSION``; the adapter never calls it itself.
    """

    def __init__(
        self,
        session_path: str | os.PathLike[str],
        *,
        trusted_roots: Iterable[str | os.PathLike[str]],
        transport: CompletionTransport,
        model: ModelDescriptor | None = None,
        leaf_id: str | None = None,
        privacy_policy: PrivacyPolicy | None = None,
        embedding_port: EmbeddingPort | None = None,
        runtime_id: str = PI_RUNTIME_ID,
    ) -> None:
        self._path = Path(session_path)
        self._roots = tuple(Path(root) for root in trusted_roots)
        self._transport = transport
        self._model = model
        self._leaf_id = leaf_id
        self._policy = privacy_policy
        self._embedding_port = embedding_port
        self._runtime_id = runtime_id
        self._diagnostics = DiagnosticsBuffer()
        self._closed = False
        self._view = PiSessionView(self._path)
        self._pins = PinReplay()
        self._snapshot: RuntimeHistorySnapshot | None = None

    @property
    def identity(self) -> AdapterIdentity:
        return AdapterIdentity(adapter_name=PI_ADAPTER_NAME, adapter_version=__version__)

    @property
    def session_path(self) -> Path:
        return self._path

    def _trusted_root_for(self, cwd: str) -> str:
        """The resolved ``cwd``, if it is an existing directory inside a trusted root; else raise."""
        if "\x00" in cwd:
            raise UntrustedPathError(
                "trusted-project-root-invalid", "the session cwd contains a NUL character"
            )
        resolved = Path(cwd).expanduser().resolve(strict=False)
        if not resolved.is_dir():
            raise UntrustedPathError(
                "trusted-project-root-not-directory", "the session cwd is not an existing directory"
            )
        for root in self._roots:
            try:
                trusted = root.expanduser().resolve(strict=True)
            except OSError:
                continue
            if resolved == trusted or resolved.is_relative_to(trusted):
                return str(resolved)
        raise UntrustedPathError(
            "trusted-project-root-untrusted", "the session cwd resolves outside every trusted root"
        )

    def snapshot_history(self) -> RuntimeHistorySnapshot:
        """The active branch as a validated snapshot; a damaged or untrusted session raises."""
        if self._closed:
            raise AdapterClosedError("adapter-closed", "the adapter was shut down")
        try:
            session = self._view.refresh()
            root = self._trusted_root_for(session.header.cwd)
            # pinned messages carry the pinned flag, from the session's own pin events (as the CLI plans)
            context = self._view.context(self._leaf_id, pinned_entry_ids=self._pins.pinned(session))
            damaged = sorted({issue.code for issue in (*session.issues, *context.issues)} & _FATAL_ISSUES)
            if damaged:
                raise PiSessionError(
                    "pi-session-damaged", "the session has damaged entries: " + ", ".join(damaged)
                )
        except UntrustedPathError:
            self._diagnostics.record(
                "canonical-history-read-failed", "session cwd is outside the trusted roots", severity="error"
            )
            raise
        except (OSError, PiSessionError):
            self._diagnostics.record(
                "canonical-history-read-failed", "the session file could not be used", severity="error"
            )
            raise
        if self._snapshot is not None and self._snapshot.session_id != session.session_id:
            self._diagnostics.record(
                "canonical-history-identity-mismatch",
                "the session file now holds another session",
                severity="error",
            )
            raise PiSessionError("pi-session-identity-changed", "the session file now holds another session")
        snapshot = self._view.snapshot(context, runtime_id=self._runtime_id, project_root=root)
        try:
            assert_valid_runtime_history_snapshot(snapshot, trusted_project_root=root)
        except ValueError:
            self._diagnostics.record(
                "canonical-history-invalid", "the session history is invalid", severity="error"
            )
            raise
        self._snapshot = snapshot
        return snapshot

    def rebuild_derived_state(self) -> None:
        """Forget the cached parse; the next snapshot reads the file from its first byte."""
        if self._closed:
            raise AdapterClosedError("adapter-closed", "the adapter was shut down")
        self._view.forget()
        self._pins = PinReplay()
        self._diagnostics.record("derived-state-rebuilt", "cached session state discarded", severity="info")

    def current_model(self) -> ModelDescriptor | None:
        return self._model

    def trusted_project_root(self) -> str:
        if self._closed:
            raise AdapterClosedError("adapter-closed", "the adapter was shut down")
        return self._trusted_root_for(self._view.refresh().header.cwd)

    def enforce_privacy(self, request: CompletionRequest) -> PrivacyResult:
        return enforce_payload_privacy(request.payload, provider=request.provider, policy=self._policy)

    async def complete(self, request: CompletionRequest) -> CompletionResult:
        return await complete_with_guards(
            request,
            closed=self._closed,
            enforce_privacy=self.enforce_privacy,
            transport=self._transport,
            diagnostics=self._diagnostics,
        )

    def capability_declarations(self) -> Sequence[CapabilityDeclaration]:
        embeddings = (
            CapabilityDeclaration(id="embeddings", supported=True, version=PI_EMBEDDING_CAPABILITY_VERSION)
            if self._embedding_port is not None
            else CapabilityDeclaration(id="embeddings", supported=False, reason=_EMBEDDING_UNSUPPORTED_REASON)
        )
        return (
            CapabilityDeclaration(id="compaction", supported=True, version=PI_COMPACTION_CAPABILITY_VERSION),
            CapabilityDeclaration(
                id="provider-continuation", supported=True, version=PI_CONTINUATION_CAPABILITY_VERSION
            ),
            embeddings,
            CapabilityDeclaration(
                id="local-kv-reuse", supported=False, reason=PI_LOCAL_KV_UNSUPPORTED_REASON
            ),
        )

    def negotiate_capabilities(self, requests: Sequence[CapabilityRequest]) -> CapabilityNegotiation:
        negotiation = negotiate_runtime_capabilities(self.capability_declarations(), requests)
        self._diagnostics.extend(list(negotiation.diagnostics))
        return negotiation

    def diagnostics(self) -> Sequence[AdapterDiagnostic]:
        return self._diagnostics.snapshot()

    async def shutdown(self) -> None:
        if not self._closed:
            self._closed = True
            self._view.forget()  # the parsed session is not kept alive by a closed adapter
            self._diagnostics.record("adapter-closed", "adapter shut down", severity="info")
