"""The small, backend-neutral interface every derived-store backend implements (SQLite now, PostgreSQL next).

Nothing here names a database, a file of the store or a connection: methods take session file paths
(canonical input), session ids, text and records. Reading the session files is
``ds4_context_engine.pi.PiSessionIndexer``'s job; a backend persists the records it returns.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Literal, Protocol, runtime_checkable

from ._records import (
    CalibrationSample,
    IndexReport,
    MemoryItem,
    PinRecord,
    SearchHit,
    StorageReport,
    StoredManifest,
    StoredSummary,
    StoreHealth,
)

__all__ = ["DerivedStore"]


@runtime_checkable
class DerivedStore(Protocol):
    """Disposable state derived from canonical session files. Deleting it must always be safe."""

    def index_file(self, path: str | os.PathLike[str]) -> IndexReport:
        """Bring what is stored for the session file ``path`` up to date (reading only appended bytes)."""
        ...

    def rebuild_session(self, path: str | os.PathLike[str]) -> IndexReport:
        """Replace everything derived from this one session file (manifests and calibration stay)."""
        ...

    def rebuild(self, paths: Iterable[str | os.PathLike[str]]) -> tuple[IndexReport, ...]:
        """Empty the whole store, then index every path; other users of the same store see the result."""
        ...

    def search(
        self,
        session_id: str,
        query: str,
        *,
        limit: int = 10,
        match: Literal["all", "any"] = "all",
        excerpts: bool = True,
    ) -> tuple[SearchHit, ...]:
        """Entries holding every word of ``query`` (``match="any"``: at least one), best first.

        ``excerpts=False``: ids and ranks only, every ``excerpt`` empty (cheaper: no excerpt is built).
        """
        ...

    def pins(self, session_id: str) -> tuple[PinRecord, ...]: ...

    def memory_items(self, session_id: str) -> tuple[MemoryItem, ...]: ...

    def record_manifest(self, session_id: str, body: str, *, leaf_id: str | None = None) -> int: ...

    def manifests(self, session_id: str, *, limit: int = 128) -> tuple[StoredManifest, ...]: ...

    def put_summary(self, summary: StoredSummary) -> None:
        """Store (or replace) the outcome for ``(summary.session_id, summary.span_hash)``."""
        ...

    def summaries(self, session_id: str) -> tuple[StoredSummary, ...]:
        """The session's cached summary outcomes, oldest first (at most ``SUMMARY_RETENTION``)."""
        ...

    def put_artifact(self, content: bytes, *, media_type: str = "text/plain") -> str: ...

    def get_artifact(self, artifact_id: str) -> bytes | None: ...

    def add_calibration_sample(
        self, profile: str, *, estimated: int, actual: int, source: str | None = None
    ) -> bool: ...

    def calibration_sources(self, profile: str) -> frozenset[str]: ...

    def calibration_samples(self, profile: str) -> tuple[CalibrationSample, ...]: ...

    def storage(self) -> StorageReport:
        """Counts and sizes; ``path`` names the store for people and never carries credentials."""
        ...

    def health(self) -> StoreHealth:
        """Whether the store is usable, and the recovery codes of what it had to do (``events``)."""
        ...

    def close(self) -> None:
        """Release the backend's resources. Idempotent."""
        ...
