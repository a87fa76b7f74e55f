"""The SQLite schema as ordered migrations, each pinned by ``sha256("<version>\\n<name>\\n<sql>")``."""

from __future__ import annotations

import hashlib
from typing import Final

__all__ = ["MIGRATIONS", "Migration", "migration_checksum"]


def migration_checksum(version: int, name: str, sql: str) -> str:
    return hashlib.sha256(f"{version}\n{name}\n{sql}".encode()).hexdigest()


class Migration:
    __slots__ = ("checksum", "name", "sql", "version")

    def __init__(self, version: int, name: str, sql: str) -> None:
        self.version = version
        self.name = name
        self.sql = sql
        self.checksum = migration_checksum(version, name, sql)


_INITIAL: Final = """
CREATE TABLE sessions (
    session_id TEXT PRIMARY KEY,
    path TEXT NOT NULL,
    cwd TEXT NOT NULL,
    version INTEGER NOT NULL,
    header_hash TEXT NOT NULL,
    indexed_offset INTEGER NOT NULL,
    indexed_line INTEGER NOT NULL,
    tail_hash TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE TABLE entries (
    entry_key TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
    entry_id TEXT NOT NULL,
    parent_id TEXT,
    type TEXT NOT NULL,
    role TEXT,
    line INTEGER NOT NULL,
    byte_offset INTEGER NOT NULL,
    chars INTEGER NOT NULL
);
CREATE INDEX entries_by_session_line ON entries(session_id, line);
CREATE VIRTUAL TABLE entries_fts USING fts5(
    entry_key UNINDEXED, session_id UNINDEXED, body, tokenize = 'unicode61'
);
CREATE TABLE pins (
    session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
    target_entry_id TEXT NOT NULL,
    label TEXT,
    event_entry_id TEXT NOT NULL,
    PRIMARY KEY (session_id, target_entry_id)
);
CREATE TABLE memory_items (
    session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
    item_id TEXT NOT NULL,
    text TEXT NOT NULL,
    event_entry_id TEXT NOT NULL,
    PRIMARY KEY (session_id, item_id)
);
CREATE TABLE artifacts (
    artifact_id TEXT PRIMARY KEY,
    media_type TEXT NOT NULL,
    size INTEGER NOT NULL,
    content BLOB NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE artifact_refs (
    session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
    entry_id TEXT NOT NULL,
    artifact_id TEXT NOT NULL REFERENCES artifacts(artifact_id),
    PRIMARY KEY (session_id, entry_id, artifact_id)
);
CREATE TABLE manifests (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    leaf_id TEXT,
    created_at TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX manifests_by_session ON manifests(session_id, id);
CREATE TABLE calibration_samples (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    profile TEXT NOT NULL,
    estimated INTEGER NOT NULL,
    actual INTEGER NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX calibration_by_profile ON calibration_samples(profile, id);
"""

# What each calibration sample was measured from (say a session's entry), so that one measurement is
# recorded once even when its session is opened again after the sample itself has aged out.
_CALIBRATION_SOURCES: Final = """
CREATE TABLE calibration_sources (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    profile TEXT NOT NULL,
    source TEXT NOT NULL,
    UNIQUE (profile, source)
);
"""

# Model-written summaries under summary-contract-v1, by the hash of the span they cover (accepted ones with
# their text, rejected ones with their code only), so a span is sent to a model once. Kept across
# rebuilds of a session, as manifests are: they cost a model call and the span hash still names them.
_SUMMARIES: Final = """
CREATE TABLE summaries (
    session_id TEXT NOT NULL,
    span_hash TEXT NOT NULL,
    contract_version TEXT NOT NULL,
    status TEXT NOT NULL,
    code TEXT,
    body TEXT,
    source_ids TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (session_id, span_hash)
);
"""

# Every manifest and calibration sample carries the id of the call that wrote it (random, unique), so a
# write retried after its answer was lost (the connection dropped after the commit) finds its own row
# instead of storing a second one. Rows written before this migration have none (NULLs never collide).
_WRITE_IDS: Final = """
ALTER TABLE manifests ADD COLUMN write_id TEXT;
CREATE UNIQUE INDEX manifests_by_write_id ON manifests(write_id);
ALTER TABLE calibration_samples ADD COLUMN write_id TEXT;
CREATE UNIQUE INDEX calibration_samples_by_write_id ON calibration_samples(write_id);
"""

# PostgreSQL's migration 5 merges its two entry tables into one (``_pg_schema.py``); SQLite's FTS5 table
# is a virtual table of its own, so here the step changes nothing. It is recorded all the same, so that
# one version number names one step on both backends.
_ONE_ENTRY_TABLE: Final = ""

MIGRATIONS: Final = (
    Migration(1, "initial", _INITIAL.strip()),
    Migration(2, "calibration-sources", _CALIBRATION_SOURCES.strip()),
    Migration(3, "summaries", _SUMMARIES.strip()),
    Migration(4, "write-ids", _WRITE_IDS.strip()),
    Migration(5, "one-entry-table", _ONE_ENTRY_TABLE),
)
