"""The default derived store: one SQLite file (WAL, foreign keys, FTS5), disposable by design.

Everything in it can be recomputed from the Pi session files, so every failure has the same answer:
a corrupt store (or one whose migration checksums do not match) is deleted and rebuilt; a file locked by
another process is left alone and this process works on an in-memory copy rebuilt from the session.
The host is never blocked for longer than the short busy timeout.

Only a file that is provably a store of ours is ever migrated or deleted: every store carries
:data:`_APPLICATION_ID` in its SQLite header. A store path that names anything else (a session file, some
other program's database) is refused untouched.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import sqlite3
import stat
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal, TypeVar

import msgspec

from ds4_context_engine._exceptions import DerivedStoreError, PiSessionError, UntrustedPathError
from ds4_context_engine.pi import (
    PiEntryShape,
    PiIndexBatch,
    PiIndexCursor,
    PiIndexEvent,
    PiIndexRecord,
    PiSessionIndexer,
)

from ._limits import (
    ARTIFACT_THRESHOLD_CHARS,
    CALIBRATION_RETENTION,
    CALIBRATION_SOURCE_RETENTION,
    MANIFEST_RETENTION,
    SUMMARY_RETENTION,
)
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
from ._schema import MIGRATIONS
from ._trust import ensure_private_directory, resolve_inside

__all__ = [
    "ARTIFACT_THRESHOLD_CHARS",
    "CALIBRATION_RETENTION",
    "CALIBRATION_SOURCE_RETENTION",
    "DEFAULT_BUSY_TIMEOUT_SECONDS",
    "MANIFEST_RETENTION",
    "SUMMARY_RETENTION",
    "SqliteDerivedStore",
    "open_derived_store",
]

DEFAULT_BUSY_TIMEOUT_SECONDS: Final = 0.25
# the reader's codes for a session path that cannot be read as a session file at all
_SOURCE_UNUSABLE: Final = frozenset({"pi-session-not-found", "pi-session-unreadable", "pi-session-too-large"})
_FTS_BODY_LIMIT: Final = 200_000
_EXCERPT_TOKENS: Final = 16
_SIDE_FILES: Final = ("-wal", "-shm", "-journal")
# every table of the schema but the migration record, children before the rows they reference
_CLEARED_TABLES: Final = (
    "entries_fts",
    "artifact_refs",
    "pins",
    "memory_items",
    "entries",
    "sessions",
    "artifacts",
    "manifests",
    "calibration_samples",
    "calibration_sources",
    "summaries",
)

_T = TypeVar("_T")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _is_lock_error(error: sqlite3.Error) -> bool:
    text = str(error).lower()
    return isinstance(error, sqlite3.OperationalError) and ("locked" in text or "busy" in text)


# The SQLite header's application id (offset 68, big-endian) of every store this module writes: "DS4C".
_APPLICATION_ID: Final = 0x44533443
_SQLITE_MAGIC: Final = b"SQLite format 3\x00"
_HEADER_BYTES: Final = 100
_APPLICATION_ID_AT: Final = slice(68, 72)
_PROBE_FLAGS: Final = (
    os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
)


def _not_a_store(path: Path) -> DerivedStoreError:
    return DerivedStoreError(
        "derived-store-path-foreign",
        f"{path}: not a ds4-context store, left untouched; choose another store path "
        "(or delete the file yourself if it is a damaged store)",
    )


def _store_claim(path: Path) -> Literal["ours", "unmarked"]:
    """Whether ``path`` holds a store of ours (or nothing yet), or an unmarked SQLite database.

    An unmarked database (application id 0: empty, or written before stores were marked) is adopted only
    if its tables are a subset of our schema's (:func:`_schema_tables`). Anything else is refused.
    """
    unreadable = DerivedStoreError(
        "derived-store-path-unreadable",
        f"{path}: the store path cannot be read as a file (a directory, FIFO or device, or no permission)",
    )
    try:
        # non-blocking: a FIFO at the store path would otherwise wait for a writer forever
        descriptor = os.open(path, _PROBE_FLAGS)
    except FileNotFoundError:
        return "ours"
    except OSError:
        raise unreadable from None
    try:
        regular = stat.S_ISREG(os.fstat(descriptor).st_mode)
        header = os.read(descriptor, _HEADER_BYTES) if regular else b""
    finally:
        os.close(descriptor)
    if not regular:
        raise unreadable
    if not header:
        return "ours"  # an empty file: ours from os.open below, or nothing to lose
    if len(header) < _HEADER_BYTES or not header.startswith(_SQLITE_MAGIC):
        raise _not_a_store(path)
    application_id = int.from_bytes(header[_APPLICATION_ID_AT], "big")
    if application_id == _APPLICATION_ID:
        return "ours"
    if application_id == 0:
        return "unmarked"
    raise _not_a_store(path)


def _apply_migrations(connection: sqlite3.Connection) -> None:
    """Bring ``connection``'s database to the newest schema and mark it as a store of ours."""
    connection.execute("PRAGMA foreign_keys = ON")
    connection.execute("BEGIN IMMEDIATE")
    try:
        connection.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            "version INTEGER PRIMARY KEY, name TEXT NOT NULL, checksum TEXT NOT NULL, "
            "applied_at TEXT NOT NULL)"
        )
        applied = {
            row[0]: row[1] for row in connection.execute("SELECT version, checksum FROM schema_migrations")
        }
        for migration in MIGRATIONS:
            if migration.version in applied:
                if applied[migration.version] != migration.checksum:
                    # a schema we did not write: treat exactly like corruption
                    raise sqlite3.DatabaseError("migration checksum mismatch")
                continue
            for statement in migration.sql.split(";\n"):
                if statement.strip():
                    connection.execute(statement)
            connection.execute(
                "INSERT INTO schema_migrations VALUES (?, ?, ?, ?)",
                (migration.version, migration.name, migration.checksum, _now()),
            )
        connection.execute(f"PRAGMA application_id = {_APPLICATION_ID}")
        connection.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            connection.execute("ROLLBACK")
        raise


def _table_names(connection: sqlite3.Connection) -> frozenset[str]:
    rows = connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    return frozenset(row[0] for row in rows)


@functools.cache
def _schema_tables() -> frozenset[str]:
    """Every table a store of the newest schema holds (FTS5's own tables included)."""
    with contextlib.closing(sqlite3.connect(":memory:", isolation_level=None)) as connection:
        _apply_migrations(connection)
        return _table_names(connection)


# The best matches by bm25 (rowid breaks ties, so the order is a function of the store). snippet() reads
# and tokenizes an entry's whole body, so it runs on the kept rows only, never on every match: on a long
# session a common word matches thousands of entries (see docs/engine/store.md for the figures).
_SEARCH_RANKS: Final = (
    "SELECT entry_key, bm25(entries_fts) AS rank, '' FROM entries_fts "
    "WHERE entries_fts MATCH ? AND session_id = ? ORDER BY rank, rowid LIMIT ?"
)
# auxiliary functions need the MATCH of their own scan; CROSS JOIN keeps ``kept`` the outer loop, so the
# second scan seeks each kept rowid instead of walking every match again
_SEARCH_WITH_EXCERPTS: Final = (
    "WITH kept(id, rank) AS MATERIALIZED ("
    "SELECT rowid, bm25(entries_fts) FROM entries_fts WHERE entries_fts MATCH ? AND session_id = ? "
    "ORDER BY bm25(entries_fts), rowid LIMIT ?"
    ") SELECT entries_fts.entry_key, kept.rank, snippet(entries_fts, 2, '', '', ' ... ', ?) "
    "FROM kept CROSS JOIN entries_fts WHERE entries_fts MATCH ? AND entries_fts.rowid = kept.id "
    "ORDER BY kept.rank, kept.id"
)


def _fts_query(text: str, joiner: str = " ") -> str:
    terms = [term.replace('"', '""') for term in text.split() if term]
    return joiner.join(f'"{term}"' for term in terms)


class SqliteDerivedStore:
    """A ``DerivedStore`` on SQLite. Use :func:`open_derived_store` to get one."""

    def __init__(self, path: Path | None, *, busy_timeout: float, events: list[str]) -> None:
        self._path = path
        self._busy_timeout = busy_timeout
        self._events = events
        self._mode: Literal["file", "memory"] = "file" if path is not None else "memory"
        # keeps the tree shapes of sessions indexed in this process, so the next append costs O(1)
        self._indexer = PiSessionIndexer()
        # one connection shared by the threads of a host; calls are serialised
        self._lock = threading.RLock()
        # (device, inode) of the file the connection has open: another process may replace it
        self._identity: tuple[int, int] | None = None
        self._connection = self._connect()

    # -- connection lifecycle ---------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        if self._mode == "memory" or self._path is None:
            connection = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            _apply_migrations(connection)
            return connection
        claim = _store_claim(self._path)
        try:
            connection = self._open_file(self._path, adopt=claim == "unmarked")
        except sqlite3.Error as error:
            if _is_lock_error(error):
                self._events.append("derived-store-locked")
                self._mode = "memory"
                return self._connect()
            if claim != "ours":  # not provably ours: never delete it
                raise _not_a_store(self._path) from None
            self._events.append("derived-store-corrupt-rebuilt")
            self._delete_files(self._path)
            connection = self._open_file(self._path, adopt=False)
        self._identity = self._file_identity()
        return connection

    def _file_identity(self) -> tuple[int, int] | None:
        if self._mode != "file" or self._path is None:
            return None
        try:
            info = os.stat(self._path)
        except OSError:
            return None
        return info.st_dev, info.st_ino

    def _reopen_if_replaced(self) -> None:
        """Reopen the store file when another process replaced or deleted it since this one opened it.

        Otherwise every later write (calibration samples, manifests) would go into the deleted file and be
        lost to every other reader.
        """
        if self._mode != "file" or self._file_identity() == self._identity:
            return
        self._events.append("derived-store-reopened")
        self._indexer.forget()
        with contextlib.suppress(sqlite3.Error):
            self._connection.close()
        self._connection = self._connect()

    def _open_file(self, path: Path, *, adopt: bool) -> sqlite3.Connection:
        if not path.exists():
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
            with contextlib.suppress(FileExistsError):
                os.close(os.open(path, flags, 0o600))
        connection = sqlite3.connect(
            str(path), timeout=self._busy_timeout, isolation_level=None, check_same_thread=False
        )
        try:
            # Before anything writes (even the journal mode is written to the file): an unmarked
            # database is adopted only when it holds nothing but our own tables.
            if adopt and not _table_names(connection) <= _schema_tables():
                raise _not_a_store(path)
            connection.execute("PRAGMA foreign_keys = ON")
            connection.execute("PRAGMA journal_mode = WAL")
            connection.execute("PRAGMA synchronous = NORMAL")
            _apply_migrations(connection)
        except BaseException:
            connection.close()
            raise
        return connection

    @staticmethod
    def _delete_files(path: Path) -> None:
        for candidate in (path, *(Path(f"{path}{suffix}") for suffix in _SIDE_FILES)):
            with contextlib.suppress(FileNotFoundError):
                candidate.unlink()

    def _reset(self, event: str) -> None:
        self._events.append(event)
        self._indexer.forget()
        with contextlib.suppress(sqlite3.Error):
            self._connection.close()
        if self._mode == "file" and self._path is not None:
            self._delete_files(self._path)
        self._connection = self._connect()

    def _guard(self, operation: Callable[[], _T]) -> _T:
        """Run ``operation``; on a lock, continue in memory; on corruption, rebuild the file; retry once."""
        with self._lock:
            self._reopen_if_replaced()
            return self._guarded(operation)

    def _guarded(self, operation: Callable[[], _T]) -> _T:
        try:
            return operation()
        except sqlite3.Error as error:
            if _is_lock_error(error):
                self._events.append("derived-store-locked")
                with contextlib.suppress(sqlite3.Error):
                    self._connection.close()
                self._mode = "memory"
                self._indexer.forget()
                self._connection = self._connect()
            else:
                self._reset("derived-store-corrupt-rebuilt")
        try:
            return operation()
        except sqlite3.Error as error:
            raise DerivedStoreError(
                "derived-store-failed", "the derived store failed twice; not retrying"
            ) from error

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        connection = self._connection
        connection.execute("BEGIN IMMEDIATE")
        try:
            yield connection
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")

    def close(self) -> None:
        """Close the connection. Idempotent."""
        with contextlib.suppress(sqlite3.Error):
            self._connection.close()

    # -- indexing ---------------------------------------------------------------------------------

    def index_file(self, path: str | os.PathLike[str]) -> IndexReport:
        """Index what was appended to the session file since the last pass (by byte offset).

        Falls back to a full pass when the store has never seen the file, or when the header or the bytes
        just before the indexed offset changed (the file was replaced rather than appended to).
        """
        file_path = Path(path)
        return self._guard(lambda: self._index_file(file_path))

    def _index_file(self, file_path: Path, *, reason: str | None = None) -> IndexReport:
        # a path with NUL names no file: the reader refuses it with its own code
        row = None
        if "\x00" not in str(file_path):
            row = self._connection.execute(
                "SELECT session_id, header_hash, indexed_offset, indexed_line, tail_hash, version, cwd "
                "FROM sessions WHERE path = ?",
                (str(file_path.resolve()),),
            ).fetchone()
        cursor = None
        if row is not None:
            session_id, header_hash, offset, line, tail_hash, version, cwd = row
            cursor = PiIndexCursor(
                session_id=session_id,
                version=version,
                cwd=cwd,
                header_hash=header_hash,
                offset=offset,
                line=line,
                tail_hash=tail_hash,
            )
        try:
            batch = self._indexer.read(
                file_path,
                cursor,
                lambda: self._entry_shapes(cursor.session_id if cursor else ""),
                reason=reason,
            )
        except PiSessionError as error:
            if reason is None and error.code in _SOURCE_UNUSABLE:
                raise DerivedStoreError(
                    "derived-store-source-unreadable", f"{file_path}: not a usable session file"
                ) from error
            raise
        stored = 0
        if batch.mode != "unchanged":
            with self._transaction():
                stored = self._store_batch(batch)
        return IndexReport(
            session_id=batch.cursor.session_id,
            mode=batch.mode,
            entries_indexed=len(batch.records),
            indexed_offset=batch.cursor.offset,
            artifacts_stored=stored,
            issues=batch.issues,
            reason=batch.reason,
        )

    def rebuild_session(self, path: str | os.PathLike[str]) -> IndexReport:
        """Delete everything derived from this session file and replay it from the start."""
        file_path = Path(path)
        return self._guard(lambda: self._index_file(file_path, reason="rebuild"))

    def rebuild(self, paths: Iterable[str | os.PathLike[str]]) -> tuple[IndexReport, ...]:
        """Delete the whole store and replay every given session file into a fresh one."""
        with self._lock:
            self._guard(self._clear)
            self._events.append("derived-store-rebuilt")
            return tuple(self.index_file(path) for path in paths)

    def _clear(self) -> None:
        """Empty every table in one transaction, in place.

        The file stays the same, so other processes with the store open keep reading and writing the
        one store everybody sees (deleting it would leave them writing into a deleted file), and two
        rebuilds at once are two transactions, not a race on file names. A store that cannot be read is
        deleted and made again by the guard, as everywhere.
        """
        self._indexer.forget()
        with self._transaction() as connection:
            for table in _CLEARED_TABLES:
                connection.execute(f"DELETE FROM {table}")  # noqa: S608 (names are our constants)

    def _entry_shapes(self, session_id: str) -> tuple[PiEntryShape, ...]:
        rows = self._connection.execute(
            "SELECT entry_id, parent_id, type, line, byte_offset FROM entries "
            "WHERE session_id = ? ORDER BY line",
            (session_id,),
        ).fetchall()
        return tuple(
            PiEntryShape(entry_id=entry_id, parent_id=parent, type=kind, line=number, offset=start)
            for entry_id, parent, kind, number, start in rows
        )

    def _store_batch(self, batch: PiIndexBatch) -> int:
        """Write ``batch`` (inside the caller's transaction); returns how many artifacts it stored."""
        connection = self._connection
        cursor = batch.cursor
        session_id = cursor.session_id
        if batch.mode == "full":
            connection.execute("DELETE FROM entries_fts WHERE session_id = ?", (session_id,))
            connection.execute("DELETE FROM sessions WHERE session_id = ?", (session_id,))
            connection.execute(
                "INSERT INTO sessions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (session_id, batch.path, cursor.cwd, cursor.version, cursor.header_hash, 0, 1, "", _now()),
            )
        stored = self._index_records(session_id, batch.records)
        connection.execute(
            "UPDATE sessions SET indexed_offset = ?, indexed_line = ?, tail_hash = ?, updated_at = ? "
            "WHERE session_id = ?",
            (cursor.offset, cursor.line, cursor.tail_hash, _now(), session_id),
        )
        return stored

    def _index_records(self, session_id: str, records: Sequence[PiIndexRecord]) -> int:
        connection = self._connection
        entry_rows: list[tuple[Any, ...]] = []
        fts_rows: list[tuple[str, str, str]] = []
        artifacts = 0
        for record in records:
            shape = record.shape
            body = record.text
            key = f"{session_id}:{shape.entry_id}"
            entry_rows.append(
                (
                    key,
                    session_id,
                    shape.entry_id,
                    shape.parent_id,
                    shape.type,
                    record.role,
                    shape.line,
                    shape.offset,
                    len(body),
                )
            )
            if body:
                fts_rows.append((key, session_id, body[:_FTS_BODY_LIMIT]))
            if record.tool_output and len(body) > ARTIFACT_THRESHOLD_CHARS:
                artifact_id = self._store_artifact(body.encode("utf-8"), "text/plain")
                connection.execute(
                    "INSERT OR IGNORE INTO artifact_refs VALUES (?, ?, ?)",
                    (session_id, shape.entry_id, artifact_id),
                )
                artifacts += 1
            if record.event is not None:
                self._apply_event(session_id, shape.entry_id, record.event)
        connection.executemany(
            "INSERT OR REPLACE INTO entries VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", entry_rows
        )
        connection.executemany("INSERT INTO entries_fts VALUES (?, ?, ?)", fts_rows)
        return artifacts

    def _apply_event(self, session_id: str, event_entry_id: str, event: PiIndexEvent) -> None:
        connection = self._connection
        if event.kind == "pin":
            connection.execute(
                "INSERT OR REPLACE INTO pins VALUES (?, ?, ?, ?)",
                (session_id, event.target, event.label, event_entry_id),
            )
        elif event.kind == "unpin":
            connection.execute(
                "DELETE FROM pins WHERE session_id = ? AND target_entry_id = ?", (session_id, event.target)
            )
        elif event.kind == "memory-remove":
            connection.execute(
                "DELETE FROM memory_items WHERE session_id = ? AND item_id = ?", (session_id, event.target)
            )
        else:
            connection.execute(
                "INSERT OR REPLACE INTO memory_items VALUES (?, ?, ?, ?)",
                (session_id, event.target, event.text, event_entry_id),
            )

    # -- queries ----------------------------------------------------------------------------------

    def search(
        self,
        session_id: str,
        query: str,
        *,
        limit: int = 10,
        match: Literal["all", "any"] = "all",
        excerpts: bool = True,
    ) -> tuple[SearchHit, ...]:
        """Full-text search (FTS5, bm25) over one session; every term is quoted, so no query syntax.

        ``match="all"`` finds entries holding every term, ``"any"`` entries holding at least one.
        ``excerpts=False`` leaves every hit's ``excerpt`` empty (ids and ranks only).
        """
        if match not in ("all", "any"):
            raise DerivedStoreError("derived-store-argument-invalid", "search match must be 'all' or 'any'")
        expression = _fts_query(query, " OR " if match == "any" else " ")
        if not expression:
            return ()
        capped = max(1, min(limit, 100))

        def run() -> tuple[SearchHit, ...]:
            if excerpts:
                rows = self._connection.execute(
                    _SEARCH_WITH_EXCERPTS, (expression, session_id, capped, _EXCERPT_TOKENS, expression)
                ).fetchall()
            else:
                rows = self._connection.execute(_SEARCH_RANKS, (expression, session_id, capped)).fetchall()
            prefix = len(session_id) + 1
            return tuple(
                SearchHit(session_id=session_id, entry_id=key[prefix:], rank=rank, excerpt=excerpt)
                for key, rank, excerpt in rows
            )

        return self._guard(run)

    def pins(self, session_id: str) -> tuple[PinRecord, ...]:
        rows = self._guard(
            lambda: self._connection.execute(
                "SELECT target_entry_id, label, event_entry_id FROM pins WHERE session_id = ? "
                "ORDER BY target_entry_id",
                (session_id,),
            ).fetchall()
        )
        return tuple(
            PinRecord(session_id=session_id, entry_id=entry_id, label=label, event_entry_id=event)
            for entry_id, label, event in rows
        )

    def memory_items(self, session_id: str) -> tuple[MemoryItem, ...]:
        rows = self._guard(
            lambda: self._connection.execute(
                "SELECT item_id, text, event_entry_id FROM memory_items "
                "WHERE session_id = ? ORDER BY item_id",
                (session_id,),
            ).fetchall()
        )
        return tuple(
            MemoryItem(session_id=session_id, item_id=item_id, text=text, event_entry_id=event)
            for item_id, text, event in rows
        )

    def indexed_offset(self, session_id: str) -> int | None:
        row = self._guard(
            lambda: self._connection.execute(
                "SELECT indexed_offset FROM sessions WHERE session_id = ?", (session_id,)
            ).fetchone()
        )
        return None if row is None else int(row[0])

    # -- manifests, artifacts, calibration -----------------------------------------------------------

    def record_manifest(self, session_id: str, body: str, *, leaf_id: str | None = None) -> int:
        """Store a plan manifest (JSON text) and keep only the newest ``MANIFEST_RETENTION`` per session."""

        write_id = uuid.uuid4().hex  # one per call: a retry of this call finds the row it wrote

        def run() -> int:
            with self._transaction() as connection:
                cursor = connection.execute(
                    "INSERT OR IGNORE INTO manifests (session_id, leaf_id, created_at, body, write_id) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (session_id, leaf_id, _now(), body, write_id),
                )
                if not cursor.rowcount:
                    row = connection.execute(
                        "SELECT id FROM manifests WHERE write_id = ?", (write_id,)
                    ).fetchone()
                    return int(row[0]) if row else 0
                connection.execute(
                    "DELETE FROM manifests WHERE session_id = ? AND id NOT IN "
                    "(SELECT id FROM manifests WHERE session_id = ? ORDER BY id DESC LIMIT ?)",
                    (session_id, session_id, MANIFEST_RETENTION),
                )
                return int(cursor.lastrowid or 0)

        return self._guard(run)

    def manifests(self, session_id: str, *, limit: int = MANIFEST_RETENTION) -> tuple[StoredManifest, ...]:
        """Newest first."""
        rows = self._guard(
            lambda: self._connection.execute(
                "SELECT id, leaf_id, created_at, body FROM manifests "
                "WHERE session_id = ? ORDER BY id DESC LIMIT ?",
                (session_id, limit),
            ).fetchall()
        )
        return tuple(
            StoredManifest(id=row_id, session_id=session_id, leaf_id=leaf, created_at=created, body=body)
            for row_id, leaf, created, body in rows
        )

    def put_summary(self, summary: StoredSummary) -> None:
        """Store the outcome for its span (replacing one there); keep the newest ``SUMMARY_RETENTION``."""
        if not isinstance(summary, StoredSummary):
            raise TypeError("expected a StoredSummary")
        row = (
            summary.session_id,
            summary.span_hash,
            summary.contract_version,
            summary.status,
            summary.code,
            summary.text if summary.status == "accepted" else None,
            msgspec.json.encode(summary.source_ids).decode(),
            summary.created_at,
        )

        def run() -> None:
            with self._transaction() as connection:
                connection.execute(
                    "INSERT OR REPLACE INTO summaries (session_id, span_hash, contract_version, status, "
                    "code, body, source_ids, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    row,
                )
                connection.execute(
                    "DELETE FROM summaries WHERE session_id = ? AND rowid NOT IN "
                    "(SELECT rowid FROM summaries WHERE session_id = ? ORDER BY rowid DESC LIMIT ?)",
                    (summary.session_id, summary.session_id, SUMMARY_RETENTION),
                )

        self._guard(run)

    def summaries(self, session_id: str) -> tuple[StoredSummary, ...]:
        rows = self._guard(
            lambda: self._connection.execute(
                "SELECT span_hash, contract_version, status, code, body, source_ids, created_at "
                "FROM summaries WHERE session_id = ? ORDER BY rowid",
                (session_id,),
            ).fetchall()
        )
        return tuple(
            StoredSummary(
                session_id=session_id,
                span_hash=span_hash,
                contract_version=version,
                status="accepted" if status == "accepted" else "rejected",
                code=code,
                text=body,
                source_ids=tuple(msgspec.json.decode(sources, type=list[str])),
                created_at=created,
            )
            for span_hash, version, status, code, body, sources, created in rows
        )

    def _store_artifact(self, content: bytes, media_type: str) -> str:
        artifact_id = hashlib.sha256(content).hexdigest()
        self._connection.execute(
            "INSERT OR IGNORE INTO artifacts VALUES (?, ?, ?, ?, ?)",
            (artifact_id, media_type, len(content), content, _now()),
        )
        return artifact_id

    def put_artifact(self, content: bytes, *, media_type: str = "text/plain") -> str:
        """Store bytes under their sha256 (hex); storing the same bytes twice keeps one copy."""

        def run() -> str:
            with self._transaction():
                return self._store_artifact(content, media_type)

        return self._guard(run)

    def get_artifact(self, artifact_id: str) -> bytes | None:
        row = self._guard(
            lambda: self._connection.execute(
                "SELECT content FROM artifacts WHERE artifact_id = ?", (artifact_id,)
            ).fetchone()
        )
        return None if row is None else bytes(row[0])

    def artifacts_for_entry(self, session_id: str, entry_id: str) -> tuple[str, ...]:
        rows = self._guard(
            lambda: self._connection.execute(
                "SELECT artifact_id FROM artifact_refs "
                "WHERE session_id = ? AND entry_id = ? ORDER BY artifact_id",
                (session_id, entry_id),
            ).fetchall()
        )
        return tuple(row[0] for row in rows)

    def add_calibration_sample(
        self, profile: str, *, estimated: int, actual: int, source: str | None = None
    ) -> bool:
        """Record one (estimate, actual) token pair; the newest ``CALIBRATION_RETENTION`` are kept.

        ``source`` names what the pair was measured from (such as ``"<session>:<entry>"``). A source
        this profile has seen is not recorded again, even after its sample has aged out; the newest
        ``CALIBRATION_SOURCE_RETENTION`` sources are remembered. Returns whether the pair was recorded.
        """
        if estimated <= 0 or actual <= 0:
            raise DerivedStoreError("calibration-sample-invalid", "token counts must be positive integers")

        write_id = uuid.uuid4().hex

        def run() -> bool:
            with self._transaction() as connection:
                if connection.execute(
                    "SELECT 1 FROM calibration_samples WHERE write_id = ?", (write_id,)
                ).fetchone():
                    return True  # this call's own earlier attempt
                if source is not None:
                    added = connection.execute(
                        "INSERT OR IGNORE INTO calibration_sources (profile, source) VALUES (?, ?)",
                        (profile, source),
                    )
                    if not added.rowcount:
                        return False
                    connection.execute(
                        "DELETE FROM calibration_sources WHERE profile = ? AND id NOT IN "
                        "(SELECT id FROM calibration_sources WHERE profile = ? ORDER BY id DESC LIMIT ?)",
                        (profile, profile, CALIBRATION_SOURCE_RETENTION),
                    )
                connection.execute(
                    "INSERT INTO calibration_samples (profile, estimated, actual, created_at, write_id) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (profile, estimated, actual, _now(), write_id),
                )
                connection.execute(
                    "DELETE FROM calibration_samples WHERE profile = ? AND id NOT IN "
                    "(SELECT id FROM calibration_samples WHERE profile = ? ORDER BY id DESC LIMIT ?)",
                    (profile, profile, CALIBRATION_RETENTION),
                )
                return True

        return self._guard(run)

    def calibration_sources(self, profile: str) -> frozenset[str]:
        """The sources of the samples this profile has recorded (see :meth:`add_calibration_sample`)."""
        rows = self._guard(
            lambda: self._connection.execute(
                "SELECT source FROM calibration_sources WHERE profile = ?", (profile,)
            ).fetchall()
        )
        return frozenset(row[0] for row in rows)

    def calibration_samples(self, profile: str) -> tuple[CalibrationSample, ...]:
        """Oldest first."""
        rows = self._guard(
            lambda: self._connection.execute(
                "SELECT estimated, actual, created_at FROM calibration_samples WHERE profile = ? ORDER BY id",
                (profile,),
            ).fetchall()
        )
        return tuple(
            CalibrationSample(profile=profile, estimated=estimated, actual=actual, created_at=created)
            for estimated, actual, created in rows
        )

    # -- reports ----------------------------------------------------------------------------------

    def storage(self) -> StorageReport:
        def count(table: str) -> int:
            return int(self._connection.execute(f"SELECT count(*) FROM {table}").fetchone()[0])  # noqa: S608

        def run() -> StorageReport:
            artifact_bytes = self._connection.execute(
                "SELECT coalesce(sum(size), 0) FROM artifacts"
            ).fetchone()[0]
            file_bytes = 0
            if self._mode == "file" and self._path is not None:
                for candidate in (self._path, Path(f"{self._path}-wal")):
                    with contextlib.suppress(FileNotFoundError):
                        file_bytes += candidate.stat().st_size
            return StorageReport(
                path=str(self._path) if self._mode == "file" else ":memory:",
                file_bytes=file_bytes,
                sessions=count("sessions"),
                entries=count("entries"),
                manifests=count("manifests"),
                pins=count("pins"),
                memory_items=count("memory_items"),
                artifacts=count("artifacts"),
                artifact_bytes=int(artifact_bytes),
                calibration_samples=count("calibration_samples"),
                schema_version=MIGRATIONS[-1].version,
            )

        return self._guard(run)

    def health(self) -> StoreHealth:
        def run() -> StoreHealth:
            rows = self._connection.execute("SELECT version, checksum FROM schema_migrations").fetchall()
            expected = {migration.version: migration.checksum for migration in MIGRATIONS}
            checksums_ok = dict(rows) == expected
            return StoreHealth(
                ok=checksums_ok,
                mode=self._mode,
                schema_version=max((row[0] for row in rows), default=0),
                migration_checksums_ok=checksums_ok,
                events=tuple(self._events),
            )

        return self._guard(run)

    @property
    def mode(self) -> Literal["file", "memory"]:
        return self._mode

    @property
    def path(self) -> Path | None:
        return self._path


def open_derived_store(
    path: str | os.PathLike[str] | None,
    *,
    trusted_roots: Iterable[str | os.PathLike[str]] | None = None,
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT_SECONDS,
) -> SqliteDerivedStore:
    """Open (creating, migrating or rebuilding as needed) the SQLite store at ``path``.

    ``None`` gives an in-memory store. The directory is created 0700 and the file 0600; a symlinked
    database file is refused, and with ``trusted_roots`` the directory must resolve inside one of them.
    """
    if path is None:
        return SqliteDerivedStore(None, busy_timeout=busy_timeout, events=[])
    file_path = Path(path).expanduser()
    if trusted_roots is not None:
        resolve_inside(file_path.parent, trusted_roots)
    ensure_private_directory(file_path.parent)
    if file_path.is_symlink():
        raise UntrustedPathError("path-symlink-refused", f"{file_path}: a symlinked database file is refused")
    return SqliteDerivedStore(
        file_path.parent.resolve() / file_path.name, busy_timeout=busy_timeout, events=[]
    )
