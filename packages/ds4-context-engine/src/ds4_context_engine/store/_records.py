"""Records the derived store returns. All frozen, keyword-only msgspec Structs; none holds a payload."""

from __future__ import annotations

from typing import Literal

import msgspec

__all__ = [
    "CalibrationSample",
    "IndexReport",
    "MemoryItem",
    "PinRecord",
    "SearchHit",
    "StorageReport",
    "StoreHealth",
    "StoredManifest",
    "StoredSummary",
]


class IndexReport(msgspec.Struct, frozen=True, kw_only=True):
    """What one indexing pass did. ``mode`` is ``incremental``, ``full`` or ``unchanged``."""

    session_id: str
    mode: Literal["incremental", "full", "unchanged"]
    entries_indexed: int
    indexed_offset: int
    artifacts_stored: int
    issues: int
    reason: str = ""


class SearchHit(msgspec.Struct, frozen=True, kw_only=True):
    """One full-text match: which entry, its bm25 rank (lower is better) and a short excerpt."""

    session_id: str
    entry_id: str
    rank: float
    excerpt: str


class PinRecord(msgspec.Struct, frozen=True, kw_only=True):
    session_id: str
    entry_id: str
    label: str | None
    event_entry_id: str


class MemoryItem(msgspec.Struct, frozen=True, kw_only=True):
    session_id: str
    item_id: str
    text: str
    event_entry_id: str


class StoredManifest(msgspec.Struct, frozen=True, kw_only=True):
    id: int
    session_id: str
    leaf_id: str | None
    created_at: str
    body: str


class StoredSummary(msgspec.Struct, frozen=True, kw_only=True):
    """A summary outcome cached by the hash of its span: ``text`` only when ``status`` is ``accepted``."""

    session_id: str
    span_hash: str
    contract_version: str
    status: Literal["accepted", "rejected"]
    code: str | None
    text: str | None
    source_ids: tuple[str, ...]
    created_at: str


class CalibrationSample(msgspec.Struct, frozen=True, kw_only=True):
    profile: str
    estimated: int
    actual: int
    created_at: str


class StorageReport(msgspec.Struct, frozen=True, kw_only=True):
    """Sizes and counts; ``path`` is ``:memory:`` when the store fell back to memory."""

    path: str
    file_bytes: int
    sessions: int
    entries: int
    manifests: int
    pins: int
    memory_items: int
    artifacts: int
    artifact_bytes: int
    calibration_samples: int
    schema_version: int


class StoreHealth(msgspec.Struct, frozen=True, kw_only=True):
    """Whether the store is usable, and what it had to do to get there (codes only)."""

    ok: bool
    mode: Literal["file", "memory"]
    schema_version: int
    migration_checksums_ok: bool
    events: tuple[str, ...]
