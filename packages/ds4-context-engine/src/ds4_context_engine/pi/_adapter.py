"""``PiSessionAdapter``: the ``runtime-adapter-v1`` contract over one Pi session file.

The session file stays canonical and is only read here. The snapshot is the active branch as Pi would
send it; the revision is the sha256 of the stable JSON of ``{leafId, entries}``. The header ``cwd`` must
resolve (symlinks followed) inside a configured trusted root, or nothing is read.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final, NamedTuple

from ds4_context_core import (
    AdapterClosedError,
    ModelDescriptor,
    RuntimeHistorySnapshot,
    stable_hash,
    stable_json,
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
from ds4_context_core.history import assert_valid_runtime_history_snapshot, build_runtime_history_snapshot
from ds4_context_core.privacy import PrivacyPolicy, PrivacyResult, enforce_payload_privacy
from ds4_context_engine._exceptions import PiSessionError, UntrustedPathError
from ds4_context_engine._version import __version__

from ._context import build_pi_context
from ._reader import (
    DEFAULT_MAX_PI_SESSION_BYTES,
    PiEntry,
    PiSession,
    extend_pi_session,
    read_pi_session,
    read_pi_session_bytes,
)

__all__ = [
    "PI_ADAPTER_NAME",
    "PI_COMPACTION_CAPABILITY_VERSION",
    "PI_CONTINUATION_CAPABILITY_VERSION",
    "PI_EMBEDDING_CAPABILITY_VERSION",
    "PI_LOCAL_KV_UNSUPPORTED_REASON",
    "PI_RUNTIME_ID",
    "PiRevisionCache",
    "PiSessionAdapter",
    "pi_session_revision",
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
    {"pi-line-corrupt", "pi-entry-invalid", "pi-entry-id-duplicate", "pi-parent-cycle", "pi-parent-dangling"}
)


_OPEN_FLAGS: Final = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class PiSessionRead(NamedTuple):
    """A parsed session and the file it came from: device, inode and the exact bytes of its header line."""

    session: PiSession
    device: int
    inode: int
    header_line: bytes


def _fresh_read(path: Path) -> PiSessionRead:
    """The whole file read as a fresh open reads it, raising that open's code (not found, a symlink ...).

    The identity is one no file has, so the read after this one is whole again.
    """
    return PiSessionRead(read_pi_session(path), -1, -1, b"")


def reload_pi_session(path: Path, previous: PiSessionRead | None = None) -> PiSessionRead:
    """Read ``path`` again, parsing only the appended bytes while it is still the file of ``previous``.

    The file is opened once without following a symlink and everything is decided and read through that
    descriptor. The prefix read before is trusted only when the descriptor names the same regular file
    (device and inode), no shorter, with its header line bytes unchanged. Otherwise the whole file is read
    and checked exactly as a fresh :func:`read_pi_session` does: a symlink is refused
    (``pi-session-unreadable``), another file is parsed from its first byte.
    """
    try:
        descriptor = os.open(path, _OPEN_FLAGS)
    except OSError:
        descriptor = -1
    if descriptor < 0:  # outside the except block, so the fresh open's error is raised unchained
        return _fresh_read(path)
    with os.fdopen(descriptor, "rb") as handle:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode) or info.st_size > DEFAULT_MAX_PI_SESSION_BYTES:
            return _fresh_read(path)
        if previous is not None and (info.st_dev, info.st_ino) == (previous.device, previous.inode):
            end = previous.session.end_offset
            if info.st_size >= end and handle.read(len(previous.header_line)) == previous.header_line:
                if info.st_size == end:
                    return previous
                handle.seek(end)
                return previous._replace(session=extend_pi_session(previous.session, handle.read()))
            handle.seek(0)
        data = handle.read(DEFAULT_MAX_PI_SESSION_BYTES + 1)
    session = read_pi_session_bytes(data, path=str(path))
    # a parsed session has a complete header line
    return PiSessionRead(session, info.st_dev, info.st_ino, data[: data.index(b"\n") + 1])


def pi_session_revision(session: PiSession, leaf_id: str | None) -> str:
    """sha256 of the stable JSON of ``{leafId, entries}`` (entries as decoded, in file order)."""
    return stable_hash({"leafId": leaf_id, "entries": [entry.data for entry in session.entries]})


class PiRevisionCache:
    """:func:`pi_session_revision` for a session that grows by appends, paying only for new entries.

    The stable JSON of ``{"entries": [...], "leafId": ...}`` is the concatenation of each entry's stable
    JSON (keys sort ``entries`` before ``leafId``), so each entry is encoded once and reused while the
    session keeps the same entry objects (``extend_pi_session`` does; a fresh read does not).
    """

    __slots__ = ("_encoded", "_entries")

    def __init__(self) -> None:
        self._entries: list[PiEntry] = []
        self._encoded: list[bytes] = []

    def revision(self, session: PiSession, leaf_id: str | None) -> str:
        known = len(self._entries)
        current = session.entries
        if known > len(current) or any(a is not b for a, b in zip(self._entries, current, strict=False)):
            self._entries, self._encoded = [], []
            known = 0
        for entry in current[known:]:
            self._entries.append(entry)
            self._encoded.append(stable_json(entry.data).encode("utf-8"))
        digest = hashlib.sha256(b'{"entries":[')
        digest.update(b",".join(self._encoded))
        digest.update(b'],"leafId":' + stable_json(leaf_id).encode("utf-8") + b"}")
        return digest.hexdigest()


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
        self._read: PiSessionRead | None = None
        self._snapshot: RuntimeHistorySnapshot | None = None
        self._revisions = PiRevisionCache()

    @property
    def identity(self) -> AdapterIdentity:
        return AdapterIdentity(adapter_name=PI_ADAPTER_NAME, adapter_version=__version__)

    @property
    def session_path(self) -> Path:
        return self._path

    def _trusted_root_for(self, cwd: str) -> str:
        resolved = Path(cwd).expanduser().resolve(strict=False)
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

    def _load(self) -> PiSession:
        """Read the session, re-reading only appended bytes while the path names the same file."""
        self._read = reload_pi_session(self._path, self._read)
        return self._read.session

    def snapshot_history(self) -> RuntimeHistorySnapshot:
        """The active branch as a validated snapshot; a damaged or untrusted session raises."""
        if self._closed:
            raise AdapterClosedError("adapter-closed", "the adapter was shut down")
        try:
            session = self._load()
            root = self._trusted_root_for(session.header.cwd)
            context = build_pi_context(session, self._leaf_id)
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
        snapshot = build_runtime_history_snapshot(
            runtime_id=self._runtime_id,
            session_id=session.session_id,
            revision=self._revisions.revision(session, context.leaf_id),
            project_root=root,
            messages=context.messages,
        )
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
        self._read = None
        self._diagnostics.record("derived-state-rebuilt", "cached session state discarded", severity="info")

    def current_model(self) -> ModelDescriptor | None:
        return self._model

    def trusted_project_root(self) -> str:
        if self._closed:
            raise AdapterClosedError("adapter-closed", "the adapter was shut down")
        return self._trusted_root_for(self._load().header.cwd)

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
            self._session = None
            self._diagnostics.record("adapter-closed", "adapter shut down", severity="info")
