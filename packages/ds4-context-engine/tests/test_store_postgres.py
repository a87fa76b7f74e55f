"""The PostgreSQL store on a real server: credentials, bad databases, faults and a fleet of processes.

Backend-neutral behaviour is tested against both backends in ``test_store_sqlite.py``; here is what
only a shared server has. Nothing is mocked: a real server (``conftest.py``), real processes, real
``pg_terminate_backend`` and a real restart.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from _pg_proxy import CommitDropProxy
from _postgres_server import SUPERUSER_PASSWORD

from ds4_context_core import MissingExtraError
from ds4_context_engine._exceptions import DerivedStoreError
from ds4_context_engine.pi import append_pi_entry, read_pi_session
from ds4_context_engine.store import (
    PG_MIGRATION_NAMES,
    PG_SCHEMA_VERSION,
    SQLITE_MIGRATION_NAMES,
    SQLITE_SCHEMA_VERSION,
    STORE_PASSWORD_ENV,
    DerivedStore,
    PostgresDerivedStore,
    StoredSummary,
    open_derived_store,
    open_postgres_store,
    open_store,
)
from ds4_context_engine.store._fts_text import _LEXEME_CACHE, _LEXEMES, tsvector_binary, tsvector_text
from ds4_context_engine.store._pg_schema import PG_MIGRATIONS

HERE = Path(__file__).parent
FIXTURES = HERE / "fixtures" / "pi"
CODING_ID = "4f1c2a7e-0b5d-4a8e-9c1f-2d3e4f5a6b7c"
WORKERS = 8

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the test server runs on POSIX")


@pytest.fixture
def opened():
    stores = []
    yield stores
    for store in stores:
        store.close()


def _open(stores, url, **kwargs):
    store = open_postgres_store(url, **kwargs)
    stores.append(store)
    return store


def _session_copy(directory: Path, number: int) -> Path:
    """The coding fixture as a session of its own (its own id)."""
    directory.mkdir(parents=True, exist_ok=True)
    data = (FIXTURES / "v3-coding.jsonl").read_bytes()
    session_id = f"{number:08d}-0b5d-4a8e-9c1f-2d3e4f5a6b7c".encode()
    target = directory / f"s{number}.jsonl"
    target.write_bytes(data.replace(CODING_ID.encode(), session_id))
    return target


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir()) if path.is_file()}


def _counts(server, database):
    with server.admin(database) as connection:
        return connection.execute(
            "SELECT (SELECT count(*) FROM ds4_context.sessions), (SELECT count(*) FROM ds4_context.entries), "
            "(SELECT count(document) FROM ds4_context.entries), "
            "(SELECT count(DISTINCT (session_id, entry_id)) FROM ds4_context.entries), "
            "(SELECT count(*) FROM ds4_context.schema_migrations)"
        ).fetchone()


def _database(url: str) -> str:
    return url.rsplit("/", 1)[1].split("?", 1)[0]


# -- the store and its schema -------------------------------------------------------------------------


def test_a_postgresql_store_is_a_derived_store_with_migrations_numbered_as_sqlites(
    postgres_server, pg_url, opened
):
    store = _open(opened, pg_url)
    assert isinstance(store, DerivedStore)
    assert PG_MIGRATION_NAMES == SQLITE_MIGRATION_NAMES
    health = store.health()
    assert PG_SCHEMA_VERSION == SQLITE_SCHEMA_VERSION == len(PG_MIGRATIONS)
    assert (health.ok, health.schema_version, health.migration_checksums_ok) == (
        True,
        PG_SCHEMA_VERSION,
        True,
    )
    with postgres_server.admin(_database(pg_url)) as connection:
        rows = connection.execute(
            "SELECT version, name, checksum FROM ds4_context.schema_migrations ORDER BY version"
        ).fetchall()
        comment = connection.execute("SELECT obj_description('ds4_context'::regnamespace)").fetchone()
    assert rows == [(m.version, m.name, m.checksum) for m in PG_MIGRATIONS]
    assert comment == ("ds4-context derived store",)
    # opening again changes nothing
    _open(opened, pg_url).close()
    assert _counts(postgres_server, _database(pg_url))[4] == len(PG_MIGRATIONS)


# the tables each later migration adds, so a store can be taken back to what an older release wrote
# what each migration did, undone, so a store can be put back to what an older release wrote
_UNDO = {
    2: ("DROP TABLE ds4_context.calibration_sources",),
    3: ("DROP TABLE ds4_context.summaries",),
    4: (
        "ALTER TABLE ds4_context.manifests DROP COLUMN write_id",
        "ALTER TABLE ds4_context.calibration_samples DROP COLUMN write_id",
        "ALTER TABLE ds4_context.entries ADD FOREIGN KEY (session_id) "
        "REFERENCES ds4_context.sessions(session_id) ON DELETE CASCADE",
        "ALTER TABLE ds4_context.entries_fts ADD FOREIGN KEY (entry_key) "
        "REFERENCES ds4_context.entries(entry_key) ON DELETE CASCADE",
        "ALTER TABLE ds4_context.session_words ADD FOREIGN KEY (session_id) "
        "REFERENCES ds4_context.sessions(session_id) ON DELETE CASCADE",
    ),
    # the two entry tables of migrations 1-4 (without their foreign keys, which 4 dropped), refilled
    5: (
        "ALTER TABLE ds4_context.entries RENAME TO entries_v5",
        "ALTER INDEX ds4_context.entries_pkey RENAME TO entries_v5_pkey",
        "CREATE TABLE ds4_context.entries (entry_key TEXT PRIMARY KEY, session_id TEXT NOT NULL, "
        "entry_id TEXT NOT NULL, parent_id TEXT, type TEXT NOT NULL, role TEXT, line BIGINT NOT NULL, "
        "byte_offset BIGINT NOT NULL, chars INTEGER NOT NULL)",
        "CREATE INDEX entries_by_session_line ON ds4_context.entries(session_id, line)",
        "CREATE TABLE ds4_context.entries_fts (entry_key TEXT PRIMARY KEY, session_id TEXT NOT NULL, "
        "body TEXT NOT NULL, words INTEGER NOT NULL, document TSVECTOR NOT NULL)",
        "CREATE INDEX entries_fts_by_session ON ds4_context.entries_fts(session_id)",
        "CREATE INDEX entries_fts_document ON ds4_context.entries_fts USING GIN (document)",
        "INSERT INTO ds4_context.entries SELECT session_id || ':' || entry_id, session_id, entry_id, "
        "parent_id, type, role, line, byte_offset, chars FROM ds4_context.entries_v5",
        "INSERT INTO ds4_context.entries_fts SELECT session_id || ':' || entry_id, session_id, body, words, "
        "document FROM ds4_context.entries_v5 WHERE document IS NOT NULL",
        "DROP TABLE ds4_context.entries_v5",
    ),
}
_ADDED_AFTER = {version: sorted(step for step in _UNDO if step > version) for version in (1, 2, 3, 4)}


@pytest.mark.parametrize("version", sorted(_ADDED_AFTER))
def test_a_store_of_an_older_schema_is_migrated_forward_with_its_data(
    postgres_server, pg_url, opened, tmp_path, version
):
    session = _session_copy(tmp_path / "sessions", 1)
    store = _open(opened, pg_url)
    store.index_file(session)
    store.add_calibration_sample("m", estimated=100, actual=120)
    store.record_manifest(read_pi_session(session).session_id, '{"older": true}')
    copied_id = read_pi_session(session).session_id
    found = [
        (hit.entry_id, hit.rank, hit.excerpt) for hit in store.search(copied_id, "parser test", match="any")
    ]
    assert found
    store.close()
    with postgres_server.admin(_database(pg_url)) as connection:  # as that release wrote it
        for step in reversed(_ADDED_AFTER[version]):
            for statement in _UNDO[step]:
                connection.execute(statement)
        connection.execute("DELETE FROM ds4_context.schema_migrations WHERE version > %s", (version,))
    store = _open(opened, pg_url)
    assert store.health().migration_checksums_ok
    assert store.health().schema_version == PG_SCHEMA_VERSION
    assert [(s.estimated, s.actual) for s in store.calibration_samples("m")] == [(100, 120)]
    assert store.index_file(session).mode == "unchanged"
    # the searchable text came along: the same hits, ranks and excerpts as before
    searched = store.search(copied_id, "parser test", match="any")
    assert [(hit.entry_id, hit.rank, hit.excerpt) for hit in searched] == found
    session_id = read_pi_session(session).session_id
    newer = store.record_manifest(session_id, '{"newer": true}')
    assert [(m.id, m.body) for m in store.manifests(session_id)] == [
        (newer, '{"newer": true}'),
        (newer - 1, '{"older": true}'),
    ]
    assert store.rebuild_session(session).entries_indexed == 16  # the bulk tables, emptied by session id
    sessions, entries, fts, distinct, _ = _counts(postgres_server, _database(pg_url))
    assert (sessions, entries, distinct) == (1, 16, 16)
    assert fts > 0
    assert store.add_calibration_sample("m", estimated=100, actual=120, source="x") is True
    summary = StoredSummary(
        session_id="s", span_hash="ab" * 32, contract_version="summary-contract-v1", status="rejected",
        code="summary-empty", text=None, source_ids=("s:1",), created_at="2026-03-01T09:00:00.000+00:00",
    )  # fmt: skip
    store.put_summary(summary)
    assert store.summaries("s") == (summary,)


def test_search_ranks_close_to_sqlite_fts5(pg_url, opened, tmp_path):
    """bm25 on tsvector against FTS5's bm25 on the same session: the same hits, ranked alike."""
    session = tmp_path / "coding.jsonl"
    shutil.copy(FIXTURES / "v3-coding.jsonl", session)
    for number in range(40):  # enough entries for bm25's statistics to matter
        words = ["parser", "test", "trim", "semicolon", "lexer", "token"][number % 6 :] + ["filler"] * (
            number % 7
        )
        append_pi_entry(
            session, "message", {"message": {"role": "user", "content": " ".join(words), "timestamp": 1}}
        )
    postgres = _open(opened, pg_url)
    sqlite = open_derived_store(tmp_path / "state" / "derived.sqlite3")
    try:
        postgres.index_file(session)
        sqlite.index_file(session)
        overlaps = []
        for query in ("parser", "trim test", "semicolon lexer", "token filler", "failing parser test"):
            for match in ("all", "any"):
                ours = [hit.entry_id for hit in postgres.search(CODING_ID, query, limit=5, match=match)]
                theirs = [hit.entry_id for hit in sqlite.search(CODING_ID, query, limit=5, match=match)]
                assert len(ours) == len(theirs)
                if theirs:
                    overlaps.append(len(set(ours) & set(theirs)) / len(theirs))
                # the same entries match at all (all of them when fewer than the limit match)
                if len(theirs) < 5:
                    assert set(ours) == set(theirs)
        assert sum(overlaps) / len(overlaps) >= 0.8, overlaps
    finally:
        sqlite.close()


def test_words_are_split_as_fts5_splits_them(pg_url, opened, tmp_path):
    path = tmp_path / "words.jsonl"
    shutil.copy(FIXTURES / "v3-coding.jsonl", path)
    entry = append_pi_entry(
        path,
        "message",
        {"message": {"role": "user", "content": "see foo.bar and trim_tests, Café", "timestamp": 1}},
    )
    plain = append_pi_entry(  # ASCII only: the words are split another way, to the same result
        path,
        "message",
        {"message": {"role": "user", "content": "Gamma_ray x9.Kappa (w1-w2)\tLAMBDA", "timestamp": 2}},
    )
    often, once = (
        append_pi_entry(
            path,
            "message",
            {"message": {"role": "user", "content": text, "timestamp": 3}},
        )
        for text in ("zeta omega zeta zeta", "zeta omega upsilon psi")
    )
    store = _open(opened, pg_url)
    store.index_file(path)
    for query in ("foo", "bar", "trim tests", "cafe", "CAFÉ"):
        assert entry.id in [hit.entry_id for hit in store.search(CODING_ID, query)], query
    for query in ("gamma", "RAY", "x9", "kappa", "w1 w2", "lambda"):
        assert [hit.entry_id for hit in store.search(CODING_ID, query)] == [plain.id], query
    assert store.search(CODING_ID, "x9.kappa_w1") == store.search(CODING_ID, "x9 kappa w1")
    # a word's count in an entry ranks it (bm25's tf), for either match
    for match in ("all", "any"):
        hits = store.search(CODING_ID, "zeta omega", match=match)
        assert [hit.entry_id for hit in hits] == [often.id, once.id], match
    assert store.search(CODING_ID, "'; DROP TABLE entries; --") == ()
    assert store.search(CODING_ID, "a & b | !c <-> d:*") == ()


def test_a_session_copied_in_binary_and_one_appended_store_the_same_words(
    postgres_server, pg_url, opened, tmp_path
):
    # a full batch is copied with binary tsvectors, an appended one upserted with literals
    texts = (
        "Ünïcode ŒUVRE straße Ωmega ﬁne zeta",
        "x" * 3000 + " fits too",  # a word too long for a lexeme is left out
        " ".join(["echo"] * 300 + ["delta"] * 2),  # more than 256 positions: 256 kept
        "",
    )
    path = tmp_path / "copied.jsonl"
    shutil.copy(FIXTURES / "v3-coding.jsonl", path)
    first = [
        append_pi_entry(path, "message", {"message": {"role": "user", "content": text, "timestamp": 1}})
        for text in texts
    ]
    store = _open(opened, pg_url)
    assert store.index_file(path).mode == "full"
    second = [
        append_pi_entry(path, "message", {"message": {"role": "user", "content": text, "timestamp": 2}})
        for text in texts
    ]
    assert store.index_file(path).mode == "incremental"
    with postgres_server.admin(_database(pg_url)) as connection:
        documents = dict(
            connection.execute(
                "SELECT session_id || ':' || entry_id, document::text FROM ds4_context.entries "
                "WHERE session_id = %s AND document IS NOT NULL",
                (CODING_ID,),
            ).fetchall()
        )
    for copied, appended in zip(first[:3], second[:3], strict=True):
        assert documents[f"{CODING_ID}:{copied.id}"] == documents[f"{CODING_ID}:{appended.id}"]
    assert documents[f"{CODING_ID}:{first[0].id}"] == (
        "'fine':1 'strasse':1 'unicode':1 'zeta':1 'œuvre':1 'ωmega':1"
    )
    assert documents[f"{CODING_ID}:{first[1].id}"] == "'fits':1 'too':1"
    assert documents[f"{CODING_ID}:{first[2].id}"].startswith("'delta':1,2 'echo':1,2,3,")
    assert documents[f"{CODING_ID}:{first[2].id}"].endswith(",256")
    assert f"{CODING_ID}:{first[3].id}" not in documents  # nothing to search
    for query, entries in (("ŒUVRE STRASSE", 0), ("ﬁne", 0), ("fits", 1), ("echo delta", 2)):
        found = {hit.entry_id for hit in store.search(CODING_ID, query)}
        assert found == {first[entries].id, second[entries].id}, query


def _binary_as_literal(document: bytes) -> str:
    """PostgreSQL's binary tsvector (count, then per lexeme: UTF-8, NUL, uint16 count, uint16 positions)
    written as its text form, to compare with :func:`tsvector_text`."""
    count, at, lexemes = int.from_bytes(document[:4], "big"), 4, []
    for _ in range(count):
        end = document.index(b"\0", at)
        word = document[at:end].decode("utf-8")
        positions = int.from_bytes(document[end + 1 : end + 3], "big")
        at = end + 3
        numbers = [int.from_bytes(document[at + 2 * n : at + 2 * n + 2], "big") for n in range(positions)]
        at += 2 * positions
        lexemes.append(f"'{word}':{','.join(map(str, numbers))}")
    assert at == len(document)
    return " ".join(lexemes)


def test_binary_tsvectors_match_the_literals_before_and_after_their_lexeme_cache_is_emptied():
    texts = [
        "Parser parser PARSER trim",
        "Œuvre straße ﬁne zeta Ωmega",
        "echo " * 300 + "delta delta",
        "x" * 3000 + " fits",
        "",
    ]
    first = [tsvector_binary(text) for text in texts]
    # distinct (word, count) pairs past the cache's bound empty it
    for number in range(_LEXEME_CACHE + 10):
        tsvector_binary(f"w{number}")
    assert len(_LEXEMES) < _LEXEME_CACHE
    again = [tsvector_binary(text) for text in texts]
    assert again == first
    for text, (document, words, distinct) in zip(texts, first, strict=True):
        literal, literal_words, literal_distinct = tsvector_text(text)
        assert sorted(literal.split(" ")) == sorted(_binary_as_literal(document).split(" "))
        assert (words, set(distinct)) == (literal_words, set(literal_distinct))
    assert _binary_as_literal(first[0][0]) == "'parser':1,2,3 'trim':1"
    assert _binary_as_literal(first[4][0]) == ""


# -- credentials --------------------------------------------------------------------------------------


def _error_texts(error: BaseException) -> str:
    texts = [str(error), repr(error)]
    cause = error.__cause__ or error.__context__
    while cause is not None:
        texts += [str(cause), repr(cause)]
        cause = cause.__cause__ or cause.__context__
    return "\n".join(texts)


@pytest.mark.parametrize(
    ("make_url", "code"),
    [
        pytest.param(
            lambda s, db: s.url(db, password="Wr0ng:secret@x"),
            "derived-store-auth-failed",
            id="wrong password",
        ),
        pytest.param(lambda s, db: s.url(db, password=None), "derived-store-auth-failed", id="no password"),
        pytest.param(
            lambda s, db: s.url("no_such_db", password="Wr0ng:secret@x"),
            "derived-store-auth-failed",
            id="wrong password and database",
        ),
        pytest.param(lambda s, db: s.url("no_such_db"), "derived-store-unreachable", id="missing database"),
        pytest.param(
            lambda s, db: s.url(db).replace(f":{s.port}/", ":1/"),
            "derived-store-unreachable",
            id="refused port",
        ),
        pytest.param(
            lambda s, db: s.url(db, sslmode="require"), "derived-store-unreachable", id="tls required"
        ),
        pytest.param(lambda s, db: s.url(db, sslmode="bogus"), "derived-store-url-invalid", id="bad sslmode"),
        pytest.param(
            lambda s, db: s.url(db, nosuchoption="1"), "derived-store-url-invalid", id="unknown option"
        ),
        pytest.param(lambda s, db: s.url(db) + "#frag", "derived-store-url-invalid", id="fragment"),
        pytest.param(
            lambda s, db: s.url(db).replace("/t_", "/a/t_"), "derived-store-url-invalid", id="two path parts"
        ),
    ],
)
def test_bad_urls_and_refusing_servers_have_codes_and_never_show_the_password(
    postgres_server, pg_url, tmp_path, caplog, make_url, code
):
    session = _session_copy(tmp_path / "sessions", 1)
    before = _snapshot(session.parent)
    url = make_url(postgres_server, _database(pg_url))
    caplog.set_level(logging.DEBUG)
    started = time.monotonic()
    with pytest.raises(DerivedStoreError) as caught:
        open_store(url, environ={})
    assert time.monotonic() - started < 30
    assert caught.value.code == code
    texts = _error_texts(caught.value) + "\n" + caplog.text
    for secret in ("Fl33t:p@ss/w0rd?", "Fl33t%3Ap%40ss", "Wr0ng:secret@x", "Wr0ng"):
        assert secret not in texts
    assert _snapshot(session.parent) == before


def test_the_password_can_come_from_the_environment_and_is_never_shown(
    postgres_server, pg_url, opened, tmp_path
):

    bare = postgres_server.url(_database(pg_url), password=None)
    store = open_postgres_store(bare, environ={STORE_PASSWORD_ENV: SUPERUSER_PASSWORD})
    opened.append(store)
    assert store.index_file(_session_copy(tmp_path / "s", 1)).mode == "full"
    shown = [repr(store), store.storage().path, str(store.health()), store.display]
    assert all(SUPERUSER_PASSWORD not in text and "p%40ss" not in text for text in shown)
    assert (
        store.storage().path == f"postgresql://postgres@127.0.0.1:{postgres_server.port}/{_database(pg_url)}"
    )
    with_password = _open(opened, pg_url)
    assert SUPERUSER_PASSWORD not in repr(with_password) + with_password.storage().path


def test_the_cli_takes_a_url_and_keeps_the_password_out_of_its_output(postgres_server, pg_url, tmp_path):
    session = _session_copy(tmp_path / "sessions", 1)
    env = {**os.environ, "DS4_CONTEXT_STORE": ""}
    command = [sys.executable, "-m", "ds4_context_engine", "index", str(session), "--store"]
    ok = subprocess.run(
        [*command, pg_url, "--json"], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["reports"][0]["mode"] == "full"
    wrong = pg_url.replace("Fl33t", "Wr0ng")
    failed = subprocess.run(
        [*command, wrong], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert failed.returncode != 0
    assert "derived-store-auth-failed" in failed.stderr
    assert "Wr0ng" not in failed.stderr + failed.stdout
    assert "Fl33t" not in ok.stderr + ok.stdout


def test_without_psycopg_the_error_names_the_extra(tmp_path):
    script = textwrap.dedent(
        """
        import sys
        sys.modules["psycopg"] = None
        from ds4_context_engine.store import open_store
        try:
            open_store("postgresql://user:hidden@127.0.0.1:1/db")
        except ImportError as error:
            print(type(error).__name__, error.code, error.extra)
            assert "hidden" not in str(error)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.split() == ["MissingExtraError", "optional-dependency-missing", "postgresql"]
    assert issubclass(MissingExtraError, ImportError)


# -- databases that are not (or not yet) ours ---------------------------------------------------------


def _state(server, database):
    with server.admin(database) as connection:
        return connection.execute(
            "SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast') ORDER BY 1"
        ).fetchall(), connection.execute(
            "SELECT obj_description(oid, 'pg_namespace') FROM pg_namespace WHERE nspname = 'ds4_context'"
        ).fetchall()


def test_another_projects_schema_is_refused_untouched(postgres_server, pg_url, tmp_path):
    database = _database(pg_url)
    with postgres_server.admin(database) as connection:
        connection.execute("CREATE SCHEMA ds4_context")
        connection.execute("CREATE TABLE ds4_context.notes (body TEXT)")
        connection.execute("INSERT INTO ds4_context.notes VALUES ('keep me')")
        connection.execute("CREATE TABLE public.schema_migrations (id TEXT)")
    before = _state(postgres_server, database)
    with pytest.raises(DerivedStoreError) as caught:
        open_store(pg_url)
    assert caught.value.code == "derived-store-database-foreign"
    assert _state(postgres_server, database) == before
    with postgres_server.admin(database) as connection:
        assert connection.execute("SELECT body FROM ds4_context.notes").fetchall() == [("keep me",)]


def test_other_applications_tables_in_the_database_are_left_alone(postgres_server, pg_url, opened, tmp_path):
    database = _database(pg_url)
    with postgres_server.admin(database) as connection:
        connection.execute("CREATE TABLE public.sessions (body TEXT)")
        connection.execute("INSERT INTO public.sessions VALUES ('theirs')")
    store = _open(opened, pg_url)
    store.index_file(_session_copy(tmp_path / "s", 1))
    store.record_manifest("s", "{}")
    store.add_calibration_sample("m", estimated=1, actual=2, source="x")
    store.rebuild([])
    with postgres_server.admin(database) as connection:
        assert connection.execute("SELECT body FROM public.sessions").fetchall() == [("theirs",)]
        tables = [
            row[0]
            for row in connection.execute(
                "SELECT tablename FROM pg_tables "
                "WHERE schemaname = 'ds4_context' AND tablename <> 'schema_migrations'"
            )
        ]
        assert {"sessions", "entries", "session_words", "manifests", "calibration_sources"} <= set(tables)
        for table in tables:  # rebuild empties every table of ours
            assert connection.execute(f"SELECT count(*) FROM ds4_context.{table}").fetchone() == (0,), table


@pytest.mark.parametrize(
    ("tamper", "code"),
    [
        pytest.param(
            "INSERT INTO ds4_context.schema_migrations VALUES (99, 'from-the-future', 'x', 'now')",
            "derived-store-schema-newer",
            id="newer schema",
        ),
        pytest.param(
            "DELETE FROM ds4_context.schema_migrations WHERE version = 2",
            "derived-store-migration-incomplete",
            id="half-applied migration",
        ),
        pytest.param(
            "DELETE FROM ds4_context.schema_migrations WHERE version = 3",
            "derived-store-migration-incomplete",
            id="half-applied summaries migration",
        ),
        pytest.param(
            "DELETE FROM ds4_context.schema_migrations WHERE version = 4",
            "derived-store-migration-incomplete",
            id="half-applied newest migration",
        ),
        pytest.param(
            "UPDATE ds4_context.schema_migrations SET checksum = 'tampered' WHERE version = 1",
            "derived-store-schema-mismatch",
            id="foreign checksum",
        ),
    ],
)
def test_a_schema_this_version_cannot_use_is_refused_untouched(
    postgres_server, pg_url, tmp_path, tamper, code
):
    database = _database(pg_url)
    session = _session_copy(tmp_path / "sessions", 1)
    store = open_store(pg_url)
    store.index_file(session)
    store.close()
    with postgres_server.admin(database) as connection:
        connection.execute(tamper)
        migrations = connection.execute("SELECT * FROM ds4_context.schema_migrations ORDER BY 1").fetchall()
    before = (_state(postgres_server, database), _snapshot(session.parent), migrations)
    with pytest.raises(DerivedStoreError) as caught:
        open_store(pg_url)
    assert caught.value.code == code
    with postgres_server.admin(database) as connection:
        migrations = connection.execute("SELECT * FROM ds4_context.schema_migrations ORDER BY 1").fetchall()
        assert connection.execute("SELECT count(*) FROM ds4_context.entries").fetchone() == (16,)
    assert (_state(postgres_server, database), _snapshot(session.parent), migrations) == before


# -- faults -------------------------------------------------------------------------------------------


def test_a_connection_dropped_mid_transaction_is_retried_without_duplicates(
    postgres_server, pg_url, opened, tmp_path
):
    database = _database(pg_url)
    session = _session_copy(tmp_path / "sessions", 1)
    session_id = read_pi_session(session).session_id
    store = _open(opened, pg_url)
    result: dict[str, object] = {}
    with postgres_server.admin(database) as blocker:
        # hold the session's indexing lock, so the store's transaction waits inside, holding writes
        blocker.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", (0x44533443, f"session:{session_id}"))

        def index():
            try:
                result["report"] = store.index_file(session)
            except Exception as error:  # pragma: no cover - reported by the assertion below
                result["error"] = error

        worker = threading.Thread(target=index)
        worker.start()
        deadline = time.monotonic() + 30
        victim = None
        while victim is None and time.monotonic() < deadline:
            row = blocker.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock' "
                "AND state = 'active' AND pid <> pg_backend_pid()",
                (database,),
            ).fetchone()
            victim = row[0] if row else None
            time.sleep(0.01)
        assert victim is not None
        assert blocker.execute("SELECT pg_terminate_backend(%s)", (victim,)).fetchone() == (True,)
        time.sleep(0.2)
        blocker.execute("SELECT pg_advisory_unlock_all()")
        worker.join(timeout=60)
    assert "error" not in result, result
    assert result["report"].entries_indexed == 16
    assert "derived-store-reconnected" in store.health().events
    sessions, entries, _, distinct, _ = _counts(postgres_server, database)
    assert (sessions, entries, distinct) == (1, 16, 16)
    assert store.index_file(session).mode == "unchanged"


@pytest.fixture
def commit_drop_proxy(postgres_server):
    proxy = CommitDropProxy("127.0.0.1", postgres_server.port)
    yield proxy
    proxy.close()


def _through(proxy: CommitDropProxy, url: str) -> str:
    host, rest = url.rsplit("@", 1)
    database = rest.split("/", 1)[1]
    return f"{host}@127.0.0.1:{proxy.port}/{database}?sslmode=disable&gssencmode=disable"


@pytest.mark.parametrize("write", ["manifest", "calibration sample"])
def test_a_write_whose_commit_answer_was_lost_is_stored_once(
    postgres_server, pg_url, opened, commit_drop_proxy, write
):
    """The connection drops after the server committed and before the client heard it; the store
    retries on a new connection, and the retry must find the row its first attempt wrote."""
    store = _open(opened, _through(commit_drop_proxy, pg_url))
    if write == "manifest":
        store.record_manifest("s", '{"n": 0}')
        commit_drop_proxy.arm(b"INSERT INTO manifests")
        stored = store.record_manifest("s", '{"n": 1}')
        rows = [(m.id, m.body) for m in store.manifests("s")]
        assert rows[0] == (stored, '{"n": 1}')
        assert [body for _, body in rows] == ['{"n": 1}', '{"n": 0}']
    else:
        commit_drop_proxy.arm(b"INSERT INTO calibration_samples")
        assert store.add_calibration_sample("m", estimated=100, actual=130) is True
        assert [(s.estimated, s.actual) for s in store.calibration_samples("m")] == [(100, 130)]
    assert commit_drop_proxy.dropped.is_set()
    assert "derived-store-reconnected" in store.health().events
    with postgres_server.admin(_database(pg_url)) as connection:
        assert connection.execute(
            "SELECT (SELECT count(*) FROM ds4_context.manifests) + "
            "(SELECT count(*) FROM ds4_context.calibration_samples)"
        ).fetchone() == (2 if write == "manifest" else 1,)


def test_the_server_restarted_under_an_open_store(postgres_server, pg_url, opened, tmp_path):
    session = _session_copy(tmp_path / "sessions", 1)
    store = _open(opened, pg_url)
    store.index_file(session)
    manifest = store.record_manifest(read_pi_session(session).session_id, "{}")
    postgres_server.restart()
    entry = append_pi_entry(
        session, "message", {"message": {"role": "user", "content": "after the restart", "timestamp": 1}}
    )
    report = store.index_file(session)
    assert (report.mode, report.entries_indexed) == ("incremental", 1)
    session_id = read_pi_session(session).session_id
    assert [hit.entry_id for hit in store.search(session_id, "restart")] == [entry.id]
    assert [m.id for m in store.manifests(session_id)] == [manifest]
    assert "derived-store-reconnected" in store.health().events
    assert _counts(postgres_server, _database(pg_url))[:2] == (1, 17)


def test_threads_sharing_one_store_each_get_their_own_answers(postgres_server, pg_url, opened):
    """One thread uses the store's held connection, the others the pool's at the same time."""
    store = _open(opened, pg_url, pool_size=3)
    failures: list[BaseException] = []
    start = threading.Barrier(6)

    def work(number: int) -> None:
        try:
            start.wait()
            for step in range(25):
                store.record_manifest(f"thread-{number}", json.dumps({"step": step}))
                newest = store.manifests(f"thread-{number}", limit=1)
                assert json.loads(newest[0].body) == {"step": step}
        except BaseException as error:  # reported by the main thread
            failures.append(error)

    threads = [threading.Thread(target=work, args=(number,)) for number in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert store.storage().manifests == 6 * 25
    # a connection killed under the held one is replaced on the next call, the answer kept
    with postgres_server.admin() as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
            (_database(pg_url),),
        )
    assert [json.loads(m.body) for m in store.manifests("thread-0", limit=2)] == [{"step": 24}, {"step": 23}]
    store.close()
    with pytest.raises(DerivedStoreError) as closed:
        store.manifests("thread-0")
    assert closed.value.code == "derived-store-closed"


# -- a fleet of processes -----------------------------------------------------------------------------


def _fleet(url: str, tmp_path: Path, mode: str, paths_per_worker: list[list[Path]]) -> list[dict]:
    go = tmp_path / "go"
    env = {**os.environ, "DS4_WORKER_GO": str(go), "PYTHONPATH": str(HERE)}
    processes = [
        subprocess.Popen(
            [sys.executable, str(HERE / "_store_worker.py"), url, mode, *map(str, paths)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for paths in paths_per_worker
    ]
    time.sleep(1.0)  # every process imported and waiting
    go.touch()
    results = []
    for process in processes:
        out, err = process.communicate(timeout=240)
        assert process.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def test_processes_racing_to_migrate_a_new_database_apply_each_migration_once(
    postgres_server, pg_url, tmp_path
):
    results = _fleet(pg_url, tmp_path, "open", [[] for _ in range(WORKERS)])
    assert results == [{"ok": True, "version": PG_SCHEMA_VERSION}] * WORKERS
    assert _counts(postgres_server, _database(pg_url)) == (0, 0, 0, 0, len(PG_MIGRATIONS))


def test_a_host_opening_a_current_store_does_not_wait_for_the_migration_lock(postgres_server, pg_url, opened):
    """A fleet's processes starting together must not queue behind each other on every start."""
    _open(opened, pg_url).close()  # the schema is now current
    outcome: dict[str, object] = {}

    def open_again() -> None:
        try:
            outcome["store"] = _open(opened, pg_url)
        except Exception as error:  # pragma: no cover - reported by the assertion below
            outcome["error"] = error

    with postgres_server.admin(_database(pg_url)) as holder:
        holder.execute("SELECT pg_advisory_lock(%s, %s)", (0x44533443, 1))  # as a migrating host would
        worker = threading.Thread(target=open_again)
        worker.start()
        worker.join(timeout=30)
        finished = not worker.is_alive()
        holder.execute("SELECT pg_advisory_unlock_all()")
    worker.join(timeout=60)
    assert finished, "opening a current store waited for the migration lock"
    assert "error" not in outcome, outcome
    assert outcome["store"].health().schema_version == PG_SCHEMA_VERSION


def test_eight_processes_index_and_query_shared_and_own_sessions_without_loss_or_duplicates(
    postgres_server, pg_url, tmp_path
):
    shared = _session_copy(tmp_path / "sessions", 0)
    own = [_session_copy(tmp_path / "sessions", number) for number in range(1, WORKERS + 1)]
    before = _snapshot(tmp_path / "sessions")
    results = _fleet(pg_url, tmp_path, "index", [[shared, own[n]] for n in range(WORKERS)])
    database = _database(pg_url)
    sessions, entries, fts, distinct, migrations = _counts(postgres_server, database)
    # one copy of every session: the shared one indexed by eight processes at once is stored once
    assert (sessions, entries, distinct, migrations) == (
        WORKERS + 1,
        16 * (WORKERS + 1),
        16 * (WORKERS + 1),
        len(PG_MIGRATIONS),
    )
    for result in results:
        assert all(mode in ("full", "unchanged") for mode in result["modes"])
        assert result["hits"] > 0
    # the shared session was written in full by as few processes as raced for it, never appended twice
    with postgres_server.admin(database) as connection:
        manifests = connection.execute(
            "SELECT session_id, count(*) FROM ds4_context.manifests GROUP BY 1 ORDER BY 1"
        ).fetchall()
        pins = connection.execute("SELECT count(document) FROM ds4_context.entries").fetchone()
    assert [count for _, count in manifests] == [3 * WORKERS] + [3] * WORKERS  # no manifest lost
    assert pins == (fts,)
    assert _snapshot(tmp_path / "sessions") == before  # the canonical files were only read
    # a single process from scratch stores exactly the same rows
    store = open_store(pg_url)
    try:
        store.rebuild([shared, *own])
        assert _counts(postgres_server, database)[:4] == (sessions, entries, fts, distinct)
    finally:
        store.close()


def test_appends_indexed_by_racing_processes_are_stored_once(postgres_server, pg_url, tmp_path):
    shared = _session_copy(tmp_path / "sessions", 0)
    store = open_store(pg_url)
    try:
        store.index_file(shared)
        appended = [
            append_pi_entry(
                shared, "message", {"message": {"role": "user", "content": f"append {n}", "timestamp": n}}
            )
            for n in range(5)
        ]
        _fleet(pg_url, tmp_path, "index", [[shared] for _ in range(WORKERS)])
        session_id = read_pi_session(shared).session_id
        raced = _counts(postgres_server, _database(pg_url))[:4]
        assert (raced[0], raced[1], raced[3]) == (1, 21, 21)
        assert {hit.entry_id for hit in store.search(session_id, "append", limit=50)} == {
            e.id for e in appended
        }
        store.rebuild([shared])  # one process from scratch: the same rows
        assert _counts(postgres_server, _database(pg_url))[:4] == raced
    finally:
        store.close()


def test_hosts_writing_the_same_summary_spans_at_once_keep_one_row_each(pg_url, opened):
    """Summaries the hosts of a fleet write for the same spans at once: one row a span, none lost."""
    stores = [_open(opened, pg_url) for _ in range(4)]
    spans = [f"{index:064x}" for index in range(24)]
    start = threading.Barrier(len(stores))
    errors: list[BaseException] = []

    def write(store, writer):
        try:
            start.wait()
            for span in spans:
                store.put_summary(StoredSummary(
                    session_id="s", span_hash=span, contract_version="summary-contract-v1", status="accepted",
                    code=None, text=f"## Objective\nwriter {writer}", source_ids=(f"s:{writer}",),
                    created_at="2026-03-01T09:00:00.000+00:00",
                ))  # fmt: skip
        except BaseException as error:  # a thread's failure must fail the test
            errors.append(error)

    threads = [threading.Thread(target=write, args=(store, n)) for n, store in enumerate(stores)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    kept = stores[0].summaries("s")
    assert sorted(r.span_hash for r in kept) == spans
    for summary in kept:  # each row is one writer's whole record, never a mix of two
        writer = summary.source_ids[0].removeprefix("s:")
        assert summary.text == f"## Objective\nwriter {writer}"


def test_reports_and_reprs_name_the_store_without_secrets(pg_url, opened):
    store = _open(opened, pg_url)
    assert isinstance(store, PostgresDerivedStore)
    assert "Fl33t" not in repr(store)
    assert "p%40ss" not in repr(store)
    store.close()
    store.close()  # idempotent
    with pytest.raises(DerivedStoreError) as caught:
        store.pins("s")
    assert caught.value.code == "derived-store-closed"
