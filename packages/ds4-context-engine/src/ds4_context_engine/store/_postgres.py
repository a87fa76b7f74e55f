"""A derived store in PostgreSQL, shared by every process and host that points at the same database.

psycopg 3 with a connection pool (the engine's ``postgresql`` extra). The schema lives in its own
PostgreSQL schema (``ds4_context``) and is migrated under an advisory lock, so hosts starting together
apply each migration once. Indexing a session takes that session's advisory lock and checks that the
stored cursor is still the one its batch was read from, so the same session indexed twice, or by two
hosts at once, is stored once. Unlike the SQLite store it never deletes a database it cannot use: a
shared database belongs to the fleet, so a newer schema, another program's tables or a half-applied
migration are refused with a code and left as they are.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar

import msgspec

from ds4_context_core import MissingExtraError
from ds4_context_engine._exceptions import DerivedStoreError, PiSessionError
from ds4_context_engine.pi import (
    PiEntryShape,
    PiIndexBatch,
    PiIndexCursor,
    PiIndexEvent,
    PiIndexRecord,
    PiSessionIndexer,
)

from ._fts_text import excerpt, fts_words, tsquery_text, tsvector_binary, tsvector_text
from ._limits import (
    ARTIFACT_THRESHOLD_CHARS,
    CALIBRATION_RETENTION,
    CALIBRATION_SOURCE_RETENTION,
    MANIFEST_RETENTION,
    SUMMARY_RETENTION,
)
from ._pg_location import PgLocation, parse_store_url
from ._pg_schema import PG_MIGRATIONS, PG_SCHEMA, PG_SCHEMA_COMMENT
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

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

__all__ = ["DEFAULT_PG_POOL_SIZE", "PostgresDerivedStore", "open_postgres_store"]

DEFAULT_PG_POOL_SIZE: Final = 4
DEFAULT_CONNECT_TIMEOUT_SECONDS: Final = 5.0
_FTS_BODY_LIMIT: Final = 200_000
_EXCERPT_TOKENS: Final = 16
# FTS5's bm25 constants, so ranks read the same on both backends
_BM25_K1: Final = 1.2
_BM25_B: Final = 0.75
# how many ts_rank-best matches bm25 re-ranks (at least 4x the limit)
_BM25_POOL: Final = 200
_SOURCE_UNUSABLE: Final = frozenset({"pi-session-not-found", "pi-session-unreadable", "pi-session-too-large"})
# (classid, objid) pairs of pg_advisory_xact_lock(int, int): "DS4C" and what is locked
_LOCK_CLASS: Final = 0x44533443
_MIGRATION_LOCK: Final = 1
_INDEX_ATTEMPTS: Final = 8
_CLEARED_TABLES: Final = (
    "session_words",
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
# what a session's rows are deleted from before its row, children first
_SESSION_BULK_TABLES: Final = ("session_words", "entries")
# SQLSTATE classes: 08 connection exception, 57P0x the server shutting down or restarting
_CONNECTION_STATES: Final = ("08", "57P01", "57P02", "57P03")
_AUTH_STATES: Final = ("28000", "28P01")
# the column types of the bulk tables for binary COPY; a tsvector goes as ready bytes of its binary
# format, which ``bytea`` passes through as they are (binary COPY names no types on the wire)
_ENTRY_TYPES: Final = (
    "text", "text", "text", "text", "text", "int8", "int8", "int4", "text", "int4", "bytea",
)  # fmt: skip
_WORD_TYPES: Final = ("text", "text", "int8")

_T = TypeVar("_T")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _psycopg() -> tuple[Any, Any]:
    """psycopg and psycopg_pool, or the ImportError that names the ``postgresql`` extra."""
    try:
        import psycopg  # noqa: PLC0415 - optional: only the PostgreSQL store needs it
        import psycopg_pool  # noqa: PLC0415
    except ImportError:
        raise MissingExtraError("postgresql", "ds4-context-engine", "psycopg") from None
    return psycopg, psycopg_pool


def _connect_failure(error: BaseException, display: str) -> DerivedStoreError:
    """A coded error for a failed connection; libpq's text is read but never repeated."""
    text = str(error).lower()
    state = getattr(error, "sqlstate", None) or ""
    if state in _AUTH_STATES or "authentication failed" in text or "no password supplied" in text:
        return DerivedStoreError(
            "derived-store-auth-failed",
            f"{display}: the server refused the credentials (set the password in the URL, "
            "$DS4_CONTEXT_STORE_PASSWORD or libpq's PGPASSWORD/.pgpass)",
        )
    if "does not exist" in text and "database" in text:
        return DerivedStoreError("derived-store-unreachable", f"{display}: the database does not exist")
    if "invalid" in text and ("option" in text or "sslmode" in text or "value" in text):
        return DerivedStoreError(
            "derived-store-url-invalid", f"{display}: a connection parameter of the URL is not valid"
        )
    return DerivedStoreError(
        "derived-store-unreachable", f"{display}: no PostgreSQL server accepted the connection"
    )


def _is_connection_error(error: BaseException) -> bool:
    pg, _ = _psycopg()
    if isinstance(error, pg.OperationalError):
        state = getattr(error, "sqlstate", None) or ""
        return not state or state.startswith(_CONNECTION_STATES)
    return isinstance(error, pg.InterfaceError)


def _identify_schema(connection: psycopg.Connection[Any], display: str) -> Literal["absent", "empty", "ours"]:
    """Refuse a ``ds4_context`` schema that is not ours; an absent or empty one may be made ours."""
    row = connection.execute(
        "SELECT n.oid, obj_description(n.oid, 'pg_namespace') FROM pg_namespace n WHERE n.nspname = %s",
        (PG_SCHEMA,),
    ).fetchone()
    if row is None:
        return "absent"
    if row[1] == PG_SCHEMA_COMMENT:
        return "ours"
    tables = connection.execute(
        "SELECT count(*) FROM pg_class WHERE relnamespace = %s AND relkind IN ('r', 'p', 'v', 'm')",
        (row[0],),
    ).fetchone()
    if tables is not None and tables[0]:
        raise DerivedStoreError(
            "derived-store-database-foreign",
            f"{display}: schema {PG_SCHEMA} holds tables that are not a ds4-context store; left untouched",
        )
    return "empty"


# (PG_SCHEMA is a constant of this module, never input)
_CURRENT_SCHEMA_QUERY: Final = (
    f"SELECT obj_description('{PG_SCHEMA}'::regnamespace, 'pg_namespace'), version, checksum "  # noqa: S608
    f"FROM {PG_SCHEMA}.schema_migrations"
)


def _schema_is_current(connection: psycopg.Connection[Any]) -> bool:
    """Whether the store is ours and at the newest schema already: one read, no lock, no transaction.

    What a host finds on every start but the first, so a fleet's processes starting together do not
    queue on the migration lock. Anything else (absent, older, newer, foreign, tampered) goes the
    locked way of :func:`_apply_migrations`, which decides and names it.
    """
    pg, _ = _psycopg()
    try:
        rows = connection.execute(_CURRENT_SCHEMA_QUERY).fetchall()
    except (pg.errors.InvalidSchemaName, pg.errors.UndefinedTable):
        return False
    expected = {migration.version: migration.checksum for migration in PG_MIGRATIONS}
    return all(row[0] == PG_SCHEMA_COMMENT for row in rows) and {row[1]: row[2] for row in rows} == expected


def _apply_migrations(connection: psycopg.Connection[Any], display: str) -> list[str]:
    """Bring the store to the newest schema under an advisory lock; returns the recovery events."""
    pg, _ = _psycopg()
    if _schema_is_current(connection):
        return []
    with connection.transaction():
        # one host migrates at a time; the others wait here, then find the work done
        connection.execute("SELECT pg_advisory_xact_lock(%s, %s)", (_LOCK_CLASS, _MIGRATION_LOCK))
        claim = _identify_schema(connection, display)
        # only a new schema is created and marked: a fleet's other roles need not own an existing one
        if claim == "absent":
            connection.execute(f"CREATE SCHEMA {PG_SCHEMA}")
        if claim != "ours":
            connection.execute(f"COMMENT ON SCHEMA {PG_SCHEMA} IS '{PG_SCHEMA_COMMENT}'")
        connection.execute(f"SET LOCAL search_path TO {PG_SCHEMA}")
        if connection.execute("SELECT to_regclass('schema_migrations')").fetchone() == (None,):
            connection.execute(
                "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, "
                "name TEXT NOT NULL, checksum TEXT NOT NULL, applied_at TEXT NOT NULL)"
            )
        applied = dict(connection.execute("SELECT version, checksum FROM schema_migrations").fetchall())
        newest = PG_MIGRATIONS[-1].version
        if applied and max(applied) > newest:
            raise DerivedStoreError(
                "derived-store-schema-newer",
                f"{display}: the store has schema version {max(applied)}, this ds4-context knows up to "
                f"{newest}; upgrade ds4-context (the database was left as it is)",
            )
        for migration in PG_MIGRATIONS:
            if migration.version in applied:
                if applied[migration.version] != migration.checksum:
                    raise DerivedStoreError(
                        "derived-store-schema-mismatch",
                        f"{display}: migration {migration.version} ({migration.name}) was recorded with "
                        "another checksum; the database was left as it is",
                    )
                continue
            try:
                with connection.transaction():
                    connection.execute(migration.sql)
            except (
                pg.errors.DuplicateTable,
                pg.errors.DuplicateObject,
                pg.errors.DuplicateColumn,
                pg.errors.UndefinedObject,
            ) as error:
                raise DerivedStoreError(
                    "derived-store-migration-incomplete",
                    f"{display}: migration {migration.version} ({migration.name}) is not recorded but "
                    "some of its changes are there (a half-applied migration); the database was left as "
                    "it is",
                ) from error
            connection.execute(
                "INSERT INTO schema_migrations VALUES (%s, %s, %s, %s)",
                (migration.version, migration.name, migration.checksum, _now()),
            )
    return []


class PostgresDerivedStore:
    """A ``DerivedStore`` on PostgreSQL. Use :func:`open_postgres_store` (or ``open_store``) to get one."""

    def __init__(
        self,
        location: PgLocation,
        pool: psycopg_pool.ConnectionPool[Any],
        *,
        events: list[str],
    ) -> None:
        self._location = location
        self._pool = pool
        self._events = events
        self._closed = False
        # keeps the tree shapes of sessions indexed in this process, so the next append costs O(1)
        self._indexer = PiSessionIndexer()
        self._index_lock = threading.RLock()
        # One pooled connection this store keeps checked out, for whichever thread finds it free: a
        # checkout and return through the pool (its locks and bookkeeping) cost as much as a small
        # query's own work. Other threads at the same time take theirs from the pool.
        self._held: psycopg.Connection[Any] | None = None
        self._held_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"PostgresDerivedStore({self._location.display!r})"

    @property
    def display(self) -> str:
        """Where the store is (``postgresql://user@host:port/db``), without any secret."""
        return self._location.display

    @property
    def mode(self) -> Literal["file", "memory"]:
        return "file"

    # -- connections ------------------------------------------------------------------------------

    def _run(self, operation: Callable[[psycopg.Connection[Any]], _T]) -> _T:
        """Run ``operation`` on a pooled connection; a lost connection is replaced and the call retried once.

        Every operation is one transaction, so a retry after a dropped connection repeats nothing that
        committed. When the connection dropped between the commit and its answer, the retry finds the
        work done: an index batch finds the session's cursor moved on, a manifest or calibration sample
        its own write id, and every other write is an upsert.
        """
        pg, pg_pool = _psycopg()
        if self._closed:
            raise DerivedStoreError("derived-store-closed", f"{self.display}: the store was closed")
        for attempt in (1, 2):
            try:
                if self._held_lock.acquire(blocking=False):
                    try:
                        return self._on_held(operation)
                    finally:
                        self._held_lock.release()
                with self._pool.connection() as connection:
                    return operation(connection)
            except pg_pool.PoolTimeout:
                raise DerivedStoreError(
                    "derived-store-unreachable",
                    f"{self.display}: no connection to the PostgreSQL server within the timeout",
                ) from None
            except pg.Error as error:
                if not _is_connection_error(error):
                    raise DerivedStoreError(
                        "derived-store-failed",
                        f"{self.display}: the database refused the operation "
                        f"(SQLSTATE {getattr(error, 'sqlstate', None) or 'none'})",
                    ) from None
                if attempt == 2:
                    raise DerivedStoreError(
                        "derived-store-connection-lost",
                        f"{self.display}: the connection to the server was lost twice; not retrying",
                    ) from None
                self._events.append("derived-store-reconnected")
                self._indexer.forget()
                self._pool.check()  # drop the other idle connections the same failure broke
        raise AssertionError("unreachable")  # pragma: no cover

    def _on_held(self, operation: Callable[[psycopg.Connection[Any]], _T]) -> _T:
        """Run ``operation`` on the held connection (under ``_held_lock``), checking one out if needed.

        After a failure, or if the operation left a transaction open, the connection goes back to the
        pool, which rolls it back, or replaces it if it is broken; the next call checks out another.
        """
        pg, _ = _psycopg()
        connection = self._held
        if connection is None:
            connection = self._held = self._pool.getconn()
        try:
            result = operation(connection)
        except BaseException:
            self._held = None
            self._pool.putconn(connection)
            raise
        if connection.info.transaction_status != pg.pq.TransactionStatus.IDLE:
            self._held = None
            self._pool.putconn(connection)
        return result

    def close(self) -> None:
        """Close the pool. Idempotent."""
        if not self._closed:
            self._closed = True
            with self._held_lock:
                if self._held is not None:
                    self._pool.putconn(self._held)
                    self._held = None
            self._pool.close()

    # -- indexing ---------------------------------------------------------------------------------

    def index_file(self, path: str | os.PathLike[str]) -> IndexReport:
        """Index what was appended to the session file since the last pass, by any host (by offset)."""
        return self._index(Path(path), None)

    def rebuild_session(self, path: str | os.PathLike[str]) -> IndexReport:
        """Delete everything derived from this session file and replay it from the start."""
        return self._index(Path(path), "rebuild")

    def rebuild(self, paths: Iterable[str | os.PathLike[str]]) -> tuple[IndexReport, ...]:
        """Empty every table in one transaction (every host sees it), then index every path."""

        def clear(connection: psycopg.Connection[Any]) -> None:
            with connection.transaction():
                connection.execute(f"TRUNCATE {', '.join(_CLEARED_TABLES)}")

        with self._index_lock:
            self._indexer.forget()
            self._run(clear)
            self._events.append("derived-store-rebuilt")
            return tuple(self.index_file(path) for path in paths)

    def _cursor_for(self, file_path: Path) -> tuple[PiIndexCursor | None, tuple[Any, ...] | None]:
        if "\x00" in str(file_path):
            return None, None  # names no file: the reader refuses it with its own code
        resolved = str(file_path.resolve())
        row = self._run(
            lambda connection: connection.execute(
                "SELECT session_id, header_hash, indexed_offset, indexed_line, tail_hash, version, cwd "
                "FROM sessions WHERE path = %s",
                (resolved,),
            ).fetchone()
        )
        if row is None:
            return None, None
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
        return cursor, (header_hash, offset, tail_hash)

    def _index(self, file_path: Path, reason: str | None) -> IndexReport:
        with self._index_lock:
            for _ in range(_INDEX_ATTEMPTS):
                report = self._index_once(file_path, reason)
                if report is not None:
                    return report
                # another process indexed this session since it was read: read again from its cursor
                self._indexer.forget()
        raise DerivedStoreError(
            "derived-store-contended",
            f"{file_path}: other processes kept indexing this session; try again",
        )

    def _index_once(self, file_path: Path, reason: str | None) -> IndexReport | None:
        cursor, base = self._cursor_for(file_path)
        session_id = cursor.session_id if cursor else ""
        try:
            batch = self._indexer.read(
                file_path, cursor, lambda: self._entry_shapes(session_id), reason=reason
            )
        except PiSessionError as error:
            if reason is None and error.code in _SOURCE_UNUSABLE:
                raise DerivedStoreError(
                    "derived-store-source-unreadable", f"{file_path}: not a usable session file"
                ) from error
            raise
        stored = 0
        if batch.mode != "unchanged":

            def write(connection: psycopg.Connection[Any]) -> int | None:
                return self._write(connection, batch, base, forced=reason is not None)

            written = self._run(write)
            if written is None:
                return None
            stored = written
        return IndexReport(
            session_id=batch.cursor.session_id,
            mode=batch.mode,
            entries_indexed=len(batch.records),
            indexed_offset=batch.cursor.offset,
            artifacts_stored=stored,
            issues=batch.issues,
            reason=batch.reason,
        )

    def _write(
        self,
        connection: psycopg.Connection[Any],
        batch: PiIndexBatch,
        base: tuple[Any, ...] | None,
        *,
        forced: bool,
    ) -> int | None:
        """Store ``batch`` if the session is still where it was read from; ``None`` if it moved on."""
        session_id = batch.cursor.session_id
        with connection.transaction():
            connection.execute(
                "SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_LOCK_CLASS, f"session:{session_id}")
            )
            row = connection.execute(
                "SELECT header_hash, indexed_offset, tail_hash FROM sessions WHERE session_id = %s",
                (session_id,),
            ).fetchone()
            current = None if row is None else tuple(row)
            if batch.mode == "incremental" and current != base:
                return None
            if batch.mode == "full" and not forced and current is not None and current != base:
                return None
            return self._store_batch(connection, batch)

    def _entry_shapes(self, session_id: str) -> tuple[PiEntryShape, ...]:
        rows = self._run(
            lambda connection: connection.execute(
                # by the key's prefix, sorted here: no index by line to keep up on every write
                "SELECT entry_id, parent_id, type, line, byte_offset FROM entries "
                "WHERE session_id = %s ORDER BY line",
                (session_id,),
            ).fetchall()
        )
        return tuple(
            PiEntryShape(entry_id=entry_id, parent_id=parent, type=kind, line=number, offset=start)
            for entry_id, parent, kind, number, start in rows
        )

    def _store_batch(self, connection: psycopg.Connection[Any], batch: PiIndexBatch) -> int:
        cursor = batch.cursor
        session_id = cursor.session_id
        if batch.mode == "full":
            # the bulk tables by session id (no foreign key to it since migration 4); deleting the
            # session row cascades to its pins, memory items and artifact references
            for table in _SESSION_BULK_TABLES:
                connection.execute(f"DELETE FROM {table} WHERE session_id = %s", (session_id,))  # noqa: S608
            connection.execute("DELETE FROM sessions WHERE session_id = %s", (session_id,))
            connection.execute(
                "INSERT INTO sessions VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, 0, 0)",
                (session_id, batch.path, cursor.cwd, cursor.version, cursor.header_hash, 0, 1, "", _now()),
            )
        stored, documents, words = self._index_records(
            connection, session_id, batch.records, fresh=batch.mode == "full"
        )
        connection.execute(
            "UPDATE sessions SET path = %s, indexed_offset = %s, indexed_line = %s, tail_hash = %s, "
            "updated_at = %s, fts_entries = fts_entries + %s, fts_words = fts_words + %s "
            "WHERE session_id = %s",
            (batch.path, cursor.offset, cursor.line, cursor.tail_hash, _now(), documents, words, session_id),
        )
        return stored

    def _index_records(
        self,
        connection: psycopg.Connection[Any],
        session_id: str,
        records: Sequence[PiIndexRecord],
        *,
        fresh: bool,
    ) -> tuple[int, int, int]:
        """Write the records; returns (artifacts referenced, searchable entries, their words).

        ``fresh``: the session has no rows (a full batch just deleted them), so its rows are streamed
        with ``COPY``, several times faster than inserts; an entry id seen twice keeps its last row,
        as the upserts of an incremental batch do. Each entry's ``tsvector`` is built while the
        previous rows are on their way, so the server indexes them as this process builds the next.
        """
        shapes: dict[str, tuple[Any, ...]] = {}
        texts: dict[str, str] = {}  # the last searchable text of each entry
        artifact_rows: list[tuple[Any, ...]] = []
        ref_rows: list[tuple[str, str, str]] = []
        events: list[tuple[str, PiIndexEvent]] = []
        for record in records:
            shape = record.shape
            body = record.text
            entry_id = shape.entry_id
            shapes[entry_id] = (
                session_id,
                entry_id,
                shape.parent_id,
                shape.type,
                record.role,
                shape.line,
                shape.offset,
                len(body),
            )
            if body:
                texts[entry_id] = body[:_FTS_BODY_LIMIT]
            if record.tool_output and len(body) > ARTIFACT_THRESHOLD_CHARS:
                content = body.encode("utf-8")
                artifact_id = hashlib.sha256(content).hexdigest()
                artifact_rows.append((artifact_id, "text/plain", len(content), content, _now()))
                ref_rows.append((session_id, entry_id, artifact_id))
            if record.event is not None:
                events.append((entry_id, record.event))
        distinct_words: list[Collection[str]] = []
        total_words = [0]

        # COPY takes each tsvector in binary, which the server reads without parsing; an upsert's
        # parameter is a literal, which it parses
        document_of: Callable[[str], tuple[str | bytes, int, Collection[str]]] = (
            tsvector_binary if fresh else tsvector_text
        )
        no_text = (None, 0, None)

        def entry_rows() -> Iterator[tuple[Any, ...]]:
            for entry_id, shape in shapes.items():
                kept = texts.get(entry_id)
                if kept is None:
                    yield (*shape, *no_text)
                    continue
                document, words, distinct = document_of(kept)
                distinct_words.append(distinct)
                total_words[0] += words
                yield (*shape, kept, words, document)

        with connection.cursor() as cursor:
            if fresh:
                with cursor.copy("COPY entries FROM STDIN (FORMAT BINARY)") as copy:
                    copy.set_types(_ENTRY_TYPES)
                    for row in entry_rows():
                        copy.write_row(row)
            else:
                cursor.executemany(_UPSERT_ENTRY, entry_rows())
            # how many of the batch's entries hold each word, counted in one pass in C
            frequencies = Counter(itertools.chain.from_iterable(distinct_words))
            if fresh:
                with cursor.copy("COPY session_words FROM STDIN (FORMAT BINARY)") as copy:
                    copy.set_types(_WORD_TYPES)
                    for word, count in frequencies.items():
                        copy.write_row((session_id, word, count))
            else:
                cursor.executemany(
                    "INSERT INTO session_words VALUES (%s, %s, %s) ON CONFLICT (session_id, word) "
                    "DO UPDATE SET entries = session_words.entries + EXCLUDED.entries",
                    [(session_id, word, count) for word, count in sorted(frequencies.items())],
                )
            cursor.executemany(
                "INSERT INTO artifacts VALUES (%s, %s, %s, %s, %s) ON CONFLICT (artifact_id) DO NOTHING",
                artifact_rows,
            )
            cursor.executemany(
                "INSERT INTO artifact_refs VALUES (%s, %s, %s) ON CONFLICT DO NOTHING", ref_rows
            )
        for event_entry_id, event in events:
            self._apply_event(connection, session_id, event_entry_id, event)
        return len(ref_rows), len(texts), total_words[0]

    @staticmethod
    def _apply_event(
        connection: psycopg.Connection[Any], session_id: str, event_entry_id: str, event: PiIndexEvent
    ) -> None:
        if event.kind == "pin":
            connection.execute(
                "INSERT INTO pins VALUES (%s, %s, %s, %s) ON CONFLICT (session_id, target_entry_id) "
                "DO UPDATE SET label = EXCLUDED.label, event_entry_id = EXCLUDED.event_entry_id",
                (session_id, event.target, event.label, event_entry_id),
            )
        elif event.kind == "unpin":
            connection.execute(
                "DELETE FROM pins WHERE session_id = %s AND target_entry_id = %s", (session_id, event.target)
            )
        elif event.kind == "memory-remove":
            connection.execute(
                "DELETE FROM memory_items WHERE session_id = %s AND item_id = %s", (session_id, event.target)
            )
        else:
            connection.execute(
                "INSERT INTO memory_items VALUES (%s, %s, %s, %s) ON CONFLICT (session_id, item_id) "
                "DO UPDATE SET text = EXCLUDED.text, event_entry_id = EXCLUDED.event_entry_id",
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
        """Full-text search over one session, ranked by bm25 as FTS5 ranks (lower is better).

        ``excerpts=False`` leaves every hit's ``excerpt`` empty and does not fetch the bodies.

        Words are found as FTS5's ``unicode61`` finds them and every one is quoted, so no query syntax.
        bm25's statistics (entry count, mean length, entries per word) are the session's own, where
        FTS5 takes them over the whole table: see ``docs/engine/store.md`` for how far the orders agree.
        """
        if match not in ("all", "any"):
            raise DerivedStoreError("derived-store-argument-invalid", "search match must be 'all' or 'any'")
        words = list(dict.fromkeys(fts_words(query)))
        if not words:
            return ()
        expression = tsquery_text(words, match_any=match == "any")
        pool_expression = expression if match == "any" else tsquery_text(words, match_any=True)
        capped = max(1, min(limit, 100))

        def run(connection: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
            return connection.execute(_BM25_QUERY if excerpts else _BM25_RANKS, {
                "session": session_id, "query": expression, "pool_query": pool_expression, "words": words,
                "limit": capped,
                "pool": max(_BM25_POOL, 4 * capped), "k1": _BM25_K1, "b": _BM25_B,
            }).fetchall()  # fmt: skip

        rows = self._run(run)
        wanted = frozenset(words)
        return tuple(
            SearchHit(
                session_id=session_id,
                entry_id=key,
                rank=float(rank),
                excerpt=excerpt(body, wanted, tokens=_EXCERPT_TOKENS) if excerpts else "",
            )
            for key, rank, body in rows
        )

    def pins(self, session_id: str) -> tuple[PinRecord, ...]:
        rows = self._run(
            lambda connection: connection.execute(
                "SELECT target_entry_id, label, event_entry_id FROM pins WHERE session_id = %s "
                "ORDER BY target_entry_id",
                (session_id,),
            ).fetchall()
        )
        return tuple(
            PinRecord(session_id=session_id, entry_id=entry_id, label=label, event_entry_id=event)
            for entry_id, label, event in rows
        )

    def memory_items(self, session_id: str) -> tuple[MemoryItem, ...]:
        rows = self._run(
            lambda connection: connection.execute(
                "SELECT item_id, text, event_entry_id FROM memory_items WHERE session_id = %s "
                "ORDER BY item_id",
                (session_id,),
            ).fetchall()
        )
        return tuple(
            MemoryItem(session_id=session_id, item_id=item_id, text=text, event_entry_id=event)
            for item_id, text, event in rows
        )

    def indexed_offset(self, session_id: str) -> int | None:
        row = self._run(
            lambda connection: connection.execute(
                "SELECT indexed_offset FROM sessions WHERE session_id = %s", (session_id,)
            ).fetchone()
        )
        return None if row is None else int(row[0])

    # -- manifests, artifacts, calibration -----------------------------------------------------------

    def record_manifest(self, session_id: str, body: str, *, leaf_id: str | None = None) -> int:
        """Store a plan manifest (JSON text) and keep only the newest ``MANIFEST_RETENTION`` per session."""

        parameters = {
            "session": session_id, "leaf": leaf_id, "now": _now(), "body": body,
            "write": uuid.uuid4().hex, "keep": MANIFEST_RETENTION - 1,
        }  # fmt: skip

        def run(connection: psycopg.Connection[Any]) -> int:
            row = connection.execute(_RECORD_MANIFEST, parameters).fetchone()
            return int(row[0]) if row else 0

        return self._run(run)

    def manifests(self, session_id: str, *, limit: int = MANIFEST_RETENTION) -> tuple[StoredManifest, ...]:
        """Newest first."""
        # prepared from the first call and answered in binary: of a lookup's time on an idle machine,
        # parsing and planning the statement and the text rows are a good part of the server's share
        rows = self._run(
            lambda connection: connection.execute(
                _MANIFESTS_QUERY, (session_id, max(0, limit)), prepare=True, binary=True
            ).fetchall()
        )
        return tuple(
            StoredManifest(id=row_id, session_id=session_id, leaf_id=leaf, created_at=created, body=body)
            for row_id, leaf, created, body in rows
        )

    def put_summary(self, summary: StoredSummary) -> None:
        """Store the outcome for its span (replacing one there); keep the newest ``SUMMARY_RETENTION``.

        Hosts writing the same span at once end with one row (the last writer's): ``ON CONFLICT``
        replaces it in place and gives it a new ``id``, so a span written again counts as the newest.
        """
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

        def run(connection: psycopg.Connection[Any]) -> None:
            with connection.transaction():
                connection.execute(
                    "INSERT INTO summaries (session_id, span_hash, contract_version, status, code, body, "
                    "source_ids, created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) "
                    "ON CONFLICT (session_id, span_hash) DO UPDATE SET id = DEFAULT, "
                    "contract_version = EXCLUDED.contract_version, status = EXCLUDED.status, "
                    "code = EXCLUDED.code, body = EXCLUDED.body, source_ids = EXCLUDED.source_ids, "
                    "created_at = EXCLUDED.created_at",
                    row,
                )
                # rows another writer has not committed yet are not seen, so this never drops more
                connection.execute(
                    "DELETE FROM summaries WHERE session_id = %s AND id <= (SELECT id FROM summaries "
                    "WHERE session_id = %s ORDER BY id DESC OFFSET %s LIMIT 1)",
                    (summary.session_id, summary.session_id, SUMMARY_RETENTION),
                )

        self._run(run)

    def summaries(self, session_id: str) -> tuple[StoredSummary, ...]:
        """The session's cached summary outcomes, oldest first."""
        rows = self._run(
            lambda connection: connection.execute(
                "SELECT span_hash, contract_version, status, code, body, source_ids, created_at "
                "FROM summaries WHERE session_id = %s ORDER BY id",
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

    def put_artifact(self, content: bytes, *, media_type: str = "text/plain") -> str:
        """Store bytes under their sha256 (hex); storing the same bytes twice (anywhere) keeps one copy."""
        artifact_id = hashlib.sha256(content).hexdigest()

        def run(connection: psycopg.Connection[Any]) -> str:
            connection.execute(
                "INSERT INTO artifacts VALUES (%s, %s, %s, %s, %s) ON CONFLICT (artifact_id) DO NOTHING",
                (artifact_id, media_type, len(content), content, _now()),
            )
            return artifact_id

        return self._run(run)

    def get_artifact(self, artifact_id: str) -> bytes | None:
        row = self._run(
            lambda connection: connection.execute(
                "SELECT content FROM artifacts WHERE artifact_id = %s", (artifact_id,)
            ).fetchone()
        )
        return None if row is None else bytes(row[0])

    def artifacts_for_entry(self, session_id: str, entry_id: str) -> tuple[str, ...]:
        rows = self._run(
            lambda connection: connection.execute(
                "SELECT artifact_id FROM artifact_refs WHERE session_id = %s AND entry_id = %s "
                "ORDER BY artifact_id",
                (session_id, entry_id),
            ).fetchall()
        )
        return tuple(row[0] for row in rows)

    def add_calibration_sample(
        self, profile: str, *, estimated: int, actual: int, source: str | None = None
    ) -> bool:
        """Record one (estimate, actual) token pair; a ``source`` is recorded once per profile, fleet-wide."""
        if estimated <= 0 or actual <= 0:
            raise DerivedStoreError("calibration-sample-invalid", "token counts must be positive integers")

        write_id = uuid.uuid4().hex  # one per call: a retry of this call finds the row it wrote

        def run(connection: psycopg.Connection[Any]) -> bool:
            with connection.transaction():
                if connection.execute(
                    "SELECT 1 FROM calibration_samples WHERE write_id = %s", (write_id,)
                ).fetchone():
                    return True  # its first attempt committed, then the connection dropped
                if source is not None:
                    added = connection.execute(
                        "INSERT INTO calibration_sources (profile, source) VALUES (%s, %s) "
                        "ON CONFLICT (profile, source) DO NOTHING",
                        (profile, source),
                    )
                    if not added.rowcount:
                        return False
                    connection.execute(
                        "DELETE FROM calibration_sources WHERE profile = %s AND id <= (SELECT id FROM "
                        "calibration_sources WHERE profile = %s ORDER BY id DESC OFFSET %s LIMIT 1)",
                        (profile, profile, CALIBRATION_SOURCE_RETENTION),
                    )
                connection.execute(
                    "INSERT INTO calibration_samples (profile, estimated, actual, created_at, write_id) "
                    "VALUES (%s, %s, %s, %s, %s)",
                    (profile, estimated, actual, _now(), write_id),
                )
                connection.execute(
                    "DELETE FROM calibration_samples WHERE profile = %s AND id <= (SELECT id FROM "
                    "calibration_samples WHERE profile = %s ORDER BY id DESC OFFSET %s LIMIT 1)",
                    (profile, profile, CALIBRATION_RETENTION),
                )
                return True

        return self._run(run)

    def calibration_sources(self, profile: str) -> frozenset[str]:
        rows = self._run(
            lambda connection: connection.execute(
                "SELECT source FROM calibration_sources WHERE profile = %s", (profile,)
            ).fetchall()
        )
        return frozenset(row[0] for row in rows)

    def calibration_samples(self, profile: str) -> tuple[CalibrationSample, ...]:
        """Oldest first."""
        rows = self._run(
            lambda connection: connection.execute(
                "SELECT estimated, actual, created_at FROM calibration_samples WHERE profile = %s "
                "ORDER BY id",
                (profile,),
            ).fetchall()
        )
        return tuple(
            CalibrationSample(profile=profile, estimated=estimated, actual=actual, created_at=created)
            for estimated, actual, created in rows
        )

    # -- reports ----------------------------------------------------------------------------------

    def storage(self) -> StorageReport:
        """Counts and sizes; ``path`` is the store's URL without credentials, ``file_bytes`` its tables."""

        def run(connection: psycopg.Connection[Any]) -> StorageReport:
            row = connection.execute(_STORAGE_QUERY, {"schema": PG_SCHEMA}).fetchone()
            assert row is not None
            (size, sessions, entries, manifests, pins, memory, artifacts, artifact_bytes, calibration) = row
            return StorageReport(
                path=self.display,
                file_bytes=int(size or 0),
                sessions=sessions,
                entries=entries,
                manifests=manifests,
                pins=pins,
                memory_items=memory,
                artifacts=artifacts,
                artifact_bytes=int(artifact_bytes),
                calibration_samples=calibration,
                schema_version=PG_MIGRATIONS[-1].version,
            )

        return self._run(run)

    def health(self) -> StoreHealth:
        def run(connection: psycopg.Connection[Any]) -> StoreHealth:
            rows = connection.execute("SELECT version, checksum FROM schema_migrations").fetchall()
            expected = {migration.version: migration.checksum for migration in PG_MIGRATIONS}
            checksums_ok = dict(rows) == expected
            return StoreHealth(
                ok=checksums_ok,
                mode="file",
                schema_version=max((row[0] for row in rows), default=0),
                migration_checksums_ok=checksums_ok,
                events=tuple(self._events),
            )

        return self._run(run)


# bm25 as FTS5 computes it (k1 1.2, b 0.75, idf clamped at 1e-6, negated so lower is better), with the
# session's entries as the corpus; tf is the number of positions of the word in the entry's tsvector.
# Scoring unnests each entry's tsvector, so it runs on the best %(pool)s matches by ts_rank (C, cheap);
# the final order is bm25's. The pool is ranked by the query's words joined by OR even for an AND query:
# ts_rank of an AND query weighs the distances between the words' positions, which are counts here
# (see ``_fts_text.tsvector_text``), while for OR it reads each word's frequency only, as bm25 does.
_BM25_TEMPLATE: Final = """
WITH corpus AS MATERIALIZED (
    SELECT fts_entries AS total, fts_words::float8 / greatest(fts_entries, 1) AS mean FROM sessions
    WHERE session_id = %(session)s
),
idf AS MATERIALIZED (
    SELECT w.word, greatest(1e-6, ln(
        (corpus.total - coalesce(s.entries, 0) + 0.5) / (coalesce(s.entries, 0) + 0.5)
    )) AS weight
    FROM corpus CROSS JOIN unnest(%(words)s::text[]) AS w(word)
    LEFT JOIN session_words s ON s.session_id = %(session)s AND s.word = w.word
),
candidates AS MATERIALIZED (
    SELECT entry_id, {body} AS body, words, document FROM entries
    WHERE session_id = %(session)s AND document @@ %(query)s::tsquery
    ORDER BY ts_rank(document, %(pool_query)s::tsquery, 1) DESC, entry_id LIMIT %(pool)s
),
scored AS (
    SELECT m.entry_id, -sum(
        idf.weight * (cardinality(u.positions) * (%(k1)s + 1))
        / (cardinality(u.positions) + %(k1)s * (1 - %(b)s + %(b)s * m.words / greatest(corpus.mean, 1)))
    ) AS rank
    FROM candidates m CROSS JOIN corpus
    CROSS JOIN LATERAL unnest(m.document) AS u(lexeme, positions, weights)
    JOIN idf ON idf.word = u.lexeme
    GROUP BY m.entry_id
)
SELECT s.entry_id, s.rank, m.body FROM scored s JOIN candidates m USING (entry_id)
ORDER BY s.rank, s.entry_id LIMIT %(limit)s
"""
_BM25_QUERY: Final = _BM25_TEMPLATE.format(body="body")
# ids and ranks only: the bodies stay on the server
_BM25_RANKS: Final = _BM25_TEMPLATE.format(body="NULL::text")

# One statement, so one round trip and one transaction: the insert, the trim to the newest
# MANIFEST_RETENTION (the new row is not visible to the delete, so it keeps one fewer of the others),
# and the id. ``write`` is unique per call: a retry after a lost answer inserts nothing, trims nothing
# and reads the id its first attempt stored.
_RECORD_MANIFEST: Final = """
WITH added AS (
    INSERT INTO manifests (session_id, leaf_id, created_at, body, write_id)
    VALUES (%(session)s, %(leaf)s, %(now)s, %(body)s, %(write)s)
    ON CONFLICT (write_id) DO NOTHING RETURNING id
), trimmed AS (
    DELETE FROM manifests WHERE session_id = %(session)s AND EXISTS (SELECT FROM added) AND id <= (
        SELECT id FROM manifests WHERE session_id = %(session)s ORDER BY id DESC OFFSET %(keep)s LIMIT 1
    )
)
SELECT id FROM added UNION ALL SELECT id FROM manifests WHERE write_id = %(write)s
"""

# An entry appended again keeps its searchable text when the new row has none, as when the text was a
# row of its own table (before migration 5); its counts in ``sessions`` are only ever added to.
_UPSERT_ENTRY: Final = """
INSERT INTO entries VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s::tsvector)
ON CONFLICT (session_id, entry_id) DO UPDATE SET parent_id = EXCLUDED.parent_id, type = EXCLUDED.type,
    role = EXCLUDED.role, line = EXCLUDED.line, byte_offset = EXCLUDED.byte_offset, chars = EXCLUDED.chars,
    body = coalesce(EXCLUDED.body, entries.body),
    words = CASE WHEN EXCLUDED.document IS NULL THEN entries.words ELSE EXCLUDED.words END,
    document = coalesce(EXCLUDED.document, entries.document)
"""

_MANIFESTS_QUERY: Final = (
    "SELECT id, leaf_id, created_at, body FROM manifests WHERE session_id = %s ORDER BY id DESC LIMIT %s"
)

_STORAGE_QUERY: Final = """
SELECT
    (SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = %(schema)s AND c.relkind = 'r'),
    (SELECT count(*) FROM sessions), (SELECT count(*) FROM entries), (SELECT count(*) FROM manifests),
    (SELECT count(*) FROM pins), (SELECT count(*) FROM memory_items), (SELECT count(*) FROM artifacts),
    (SELECT coalesce(sum(size), 0) FROM artifacts), (SELECT count(*) FROM calibration_samples)
"""


def open_postgres_store(
    url: str,
    *,
    pool_size: int = DEFAULT_PG_POOL_SIZE,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_SECONDS,
    environ: Mapping[str, str] | None = None,
) -> PostgresDerivedStore:
    """Connect to the PostgreSQL store at ``url``, migrating it to the newest schema.

    The password comes from the URL, else ``$DS4_CONTEXT_STORE_PASSWORD``, else libpq's ``PGPASSWORD``
    or ``~/.pgpass``; TLS parameters in the URL (``sslmode``, ``sslrootcert``...) reach libpq as given.
    Needs the ``postgresql`` extra (``MissingExtraError`` naming it otherwise).
    """
    pg, pg_pool = _psycopg()
    location = parse_store_url(url, environ=environ)
    if pool_size < 1 or connect_timeout <= 0:
        raise DerivedStoreError("derived-store-argument-invalid", "pool_size >= 1 and connect_timeout > 0")
    try:
        pg.conninfo.conninfo_to_dict(location.conninfo)
    except pg.Error:
        raise DerivedStoreError(
            "derived-store-url-invalid", f"{location.display}: a connection parameter of the URL is not valid"
        ) from None
    kwargs: dict[str, Any] = {"autocommit": True, **location.secrets}
    if "connect_timeout" not in location.conninfo:
        kwargs["connect_timeout"] = max(1, round(connect_timeout))
    try:
        probe = pg.connect(location.conninfo, **kwargs)
    except pg.Error as error:
        raise _connect_failure(error, location.display) from None
    try:
        with probe:
            events = _apply_migrations(probe, location.display)
    except pg.Error as error:
        if _is_connection_error(error):
            raise _connect_failure(error, location.display) from None
        raise DerivedStoreError(
            "derived-store-failed",
            f"{location.display}: migrating the store failed (SQLSTATE {error.sqlstate or 'none'})",
        ) from None

    def configure(connection: psycopg.Connection[Any]) -> None:
        # (commits keep the server's own durability: a fleet's rows are acknowledged only once the
        # server's synchronous_commit says they are safe, so no setting of it is made here)
        connection.execute(f"SET search_path TO {PG_SCHEMA}")

    pool = pg_pool.ConnectionPool(
        location.conninfo,
        kwargs=kwargs,
        min_size=1,
        max_size=pool_size,
        timeout=connect_timeout,
        configure=configure,
        open=False,
        name="ds4-context-store",
    )
    try:
        pool.open(wait=True, timeout=connect_timeout)
    except pg_pool.PoolTimeout:
        pool.close()
        raise DerivedStoreError(
            "derived-store-unreachable", f"{location.display}: the connection pool could not connect"
        ) from None
    return PostgresDerivedStore(location, pool, events=events)
