"""The PostgreSQL schema as ordered migrations, numbered and named as SQLite's (``_schema.py``).

Each migration is the same step as its SQLite namesake in PostgreSQL's dialect: identity columns for
``AUTOINCREMENT``, ``BYTEA`` for ``BLOB``, and, for the FTS5 table, a ``tsvector`` column under a GIN
index (a table of its own until migration 5 made it columns of ``entries``), plus the statistics bm25
needs, which FTS5 keeps in its own shadow tables: each session's count of searchable entries and words
(``sessions.fts_entries``/``fts_words``) and how many of its entries hold each word
(``session_words``). Every table lives in the PostgreSQL schema :data:`PG_SCHEMA`, so a store shares a
database with other applications without touching their tables. Checksums are
``sha256("<version>\\n<name>\\n<sql>")`` as for SQLite.
"""

from __future__ import annotations

from typing import Final

from ._schema import MIGRATIONS as SQLITE_MIGRATIONS
from ._schema import Migration

__all__ = ["PG_MIGRATIONS", "PG_SCHEMA", "PG_SCHEMA_COMMENT"]

PG_SCHEMA: Final = "ds4_context"
# Marks the schema as a ds4-context store, the way SQLite stores carry an application id.
PG_SCHEMA_COMMENT: Final = "ds4-context derived store"

_INITIAL: Final = """
CREATE TABLE sessions (
    session_id TEXT PRIMARY KEY,
    path TEXT NOT NULL,
    cwd TEXT NOT NULL,
    version INTEGER NOT NULL,
    header_hash TEXT NOT NULL,
    indexed_offset BIGINT NOT NULL,
    indexed_line BIGINT NOT NULL,
    tail_hash TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    fts_entries BIGINT NOT NULL,
    fts_words BIGINT NOT NULL
);
CREATE INDEX sessions_by_path ON sessions(path);
CREATE TABLE entries (
    entry_key TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
    entry_id TEXT NOT NULL,
    parent_id TEXT,
    type TEXT NOT NULL,
    role TEXT,
    line BIGINT NOT NULL,
    byte_offset BIGINT NOT NULL,
    chars INTEGER NOT NULL
);
CREATE INDEX entries_by_session_line ON entries(session_id, line);
CREATE TABLE entries_fts (
    entry_key TEXT PRIMARY KEY REFERENCES entries(entry_key) ON DELETE CASCADE,
    session_id TEXT NOT NULL,
    body TEXT NOT NULL,
    words INTEGER NOT NULL,
    document TSVECTOR NOT NULL
);
CREATE INDEX entries_fts_by_session ON entries_fts(session_id);
CREATE TABLE session_words (
    session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
    word TEXT NOT NULL,
    entries BIGINT NOT NULL,
    PRIMARY KEY (session_id, word)
);
CREATE INDEX entries_fts_document ON entries_fts USING GIN (document);
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
    size BIGINT NOT NULL,
    content BYTEA NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE artifact_refs (
    session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
    entry_id TEXT NOT NULL,
    artifact_id TEXT NOT NULL REFERENCES artifacts(artifact_id),
    PRIMARY KEY (session_id, entry_id, artifact_id)
);
CREATE TABLE manifests (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id TEXT NOT NULL,
    leaf_id TEXT,
    created_at TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX manifests_by_session ON manifests(session_id, id);
CREATE TABLE calibration_samples (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    profile TEXT NOT NULL,
    estimated INTEGER NOT NULL,
    actual INTEGER NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX calibration_by_profile ON calibration_samples(profile, id);
"""

_CALIBRATION_SOURCES: Final = """
CREATE TABLE calibration_sources (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    profile TEXT NOT NULL,
    source TEXT NOT NULL,
    UNIQUE (profile, source)
);
CREATE INDEX calibration_sources_by_profile ON calibration_sources(profile, id);
"""

# SQLite's summaries table, kept across rebuilds of a session as there (so no foreign key to
# ``sessions``, whose row a session rebuild deletes). ``id`` stands in for SQLite's rowid: it orders the
# rows for retention, and a span written again takes a new one, as ``INSERT OR REPLACE`` gives there.
_SUMMARIES: Final = """
CREATE TABLE summaries (
    id BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
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
CREATE INDEX summaries_by_session ON summaries(session_id, id);
"""

# SQLite's write ids (see ``_schema.py``), and one step of PostgreSQL's own: the three tables a batch
# fills by the thousand (entries, their searchable text, the words per session) lose their foreign keys
# to their session, which checked every copied row with a lookup of its own (a third of the server's
# indexing time). Nothing is lost by it: every row is written and deleted with its session, by session id,
# under the session's lock (``_postgres.py``); the few rows of pins, memory items and artifact
# references keep theirs.
_WRITE_IDS: Final = """
ALTER TABLE manifests ADD COLUMN write_id TEXT;
CREATE UNIQUE INDEX manifests_by_write_id ON manifests(write_id);
ALTER TABLE calibration_samples ADD COLUMN write_id TEXT;
CREATE UNIQUE INDEX calibration_samples_by_write_id ON calibration_samples(write_id);
ALTER TABLE entries DROP CONSTRAINT entries_session_id_fkey;
ALTER TABLE entries_fts DROP CONSTRAINT entries_fts_entry_key_fkey;
ALTER TABLE session_words DROP CONSTRAINT session_words_session_id_fkey;
"""

# PostgreSQL's own step (SQLite's migration 5 changes nothing): ``entries`` and ``entries_fts`` become
# one table, keyed by (session id, entry id), whose rows carry their searchable text, word count and
# tsvector (NULL for an entry with nothing to search). Every entry was two heap rows under four B-trees
# (each table's key, ``entries_by_session_line``, ``entries_fts_by_session``) and the GIN index; it is
# one row under one B-tree and the GIN index. The key's prefix serves what the other B-trees did (a
# session's rows by session id; its tree shapes are read by session and sorted by line, a few thousand
# rows read once per process and session). The rows are carried over in the same transaction.
_ONE_ENTRY_TABLE: Final = """
ALTER TABLE entries RENAME TO entries_v4;
ALTER INDEX entries_pkey RENAME TO entries_v4_pkey;
CREATE TABLE entries (
    session_id TEXT NOT NULL,
    entry_id TEXT NOT NULL,
    parent_id TEXT,
    type TEXT NOT NULL,
    role TEXT,
    line BIGINT NOT NULL,
    byte_offset BIGINT NOT NULL,
    chars INTEGER NOT NULL,
    body TEXT,
    words INTEGER NOT NULL,
    document TSVECTOR,
    PRIMARY KEY (session_id, entry_id)
);
INSERT INTO entries
SELECT e.session_id, e.entry_id, e.parent_id, e.type, e.role, e.line, e.byte_offset, e.chars,
    f.body, coalesce(f.words, 0), f.document
FROM entries_v4 e LEFT JOIN entries_fts f ON f.entry_key = e.entry_key;
DROP TABLE entries_fts;
DROP TABLE entries_v4;
CREATE INDEX entries_document ON entries USING GIN (document);
"""

PG_MIGRATIONS: Final = (
    Migration(1, "initial", _INITIAL.strip()),
    Migration(2, "calibration-sources", _CALIBRATION_SOURCES.strip()),
    Migration(3, "summaries", _SUMMARIES.strip()),
    Migration(4, "write-ids", _WRITE_IDS.strip()),
    Migration(5, "one-entry-table", _ONE_ENTRY_TABLE.strip()),
)

# the same steps under the same numbers as SQLite's, so one version means one schema on both backends
assert [(m.version, m.name) for m in PG_MIGRATIONS] == [(m.version, m.name) for m in SQLITE_MIGRATIONS]
