"""The derived store: incremental indexing, events, retention and failure recovery.

Tests taking the ``store`` or ``backend`` fixture (``conftest.py``) run against every backend: SQLite on
real files and PostgreSQL on a real server. The rest are about SQLite's files themselves.
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import stat
import threading
import time
from contextlib import closing
from pathlib import Path

import pytest

from ds4_context_engine._exceptions import DerivedStoreError, UntrustedPathError
from ds4_context_engine.pi import append_pi_entry, create_pi_session, read_pi_session
from ds4_context_engine.store import (
    CALIBRATION_RETENTION,
    CALIBRATION_SOURCE_RETENTION,
    MANIFEST_RETENTION,
    SQLITE_MIGRATION_CHECKSUMS,
    SQLITE_MIGRATION_NAMES,
    DerivedStore,
    StoredSummary,
    append_memory_event,
    append_pin_event,
    append_unpin_event,
    open_derived_store,
)
from ds4_context_engine.store._schema import MIGRATIONS

FIXTURES = Path(__file__).parent / "fixtures" / "pi"
CODING_ID = "4f1c2a7e-0b5d-4a8e-9c1f-2d3e4f5a6b7c"


@pytest.fixture
def session_path(tmp_path):
    path = tmp_path / "sessions" / "coding.jsonl"
    path.parent.mkdir()
    shutil.copy(FIXTURES / "v3-coding.jsonl", path)
    return path


@pytest.fixture
def sqlite_store(tmp_path):
    opened = open_derived_store(tmp_path / "state" / "derived.sqlite3")
    yield opened
    opened.close()


def _summary(session_id):
    return StoredSummary(
        session_id=session_id,
        span_hash="ab" * 32,
        contract_version="summary-contract-v1",
        status="accepted",
        code=None,
        text="## Objective\nx",
        source_ids=(f"{session_id}:1",),
        created_at="2026-03-01T09:00:00.000+00:00",
    )


def _user(text):
    return {"message": {"role": "user", "content": text, "timestamp": 1}}


def test_store_is_private_wal_with_foreign_keys_and_pinned_migrations(tmp_path, sqlite_store):
    store = sqlite_store
    path = tmp_path / "state" / "derived.sqlite3"
    assert isinstance(store, DerivedStore)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    with closing(sqlite3.connect(path)) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        rows = connection.execute("SELECT version, name, checksum FROM schema_migrations").fetchall()
    assert [row[1] for row in rows] == list(SQLITE_MIGRATION_NAMES)
    assert SQLITE_MIGRATION_NAMES == (
        "initial",
        "calibration-sources",
        "summaries",
        "write-ids",
        "one-entry-table",
    )
    for (version, name, checksum), migration in zip(rows, MIGRATIONS, strict=True):
        expected = hashlib.sha256(f"{version}\n{name}\n{migration.sql}".encode()).hexdigest()
        assert checksum == expected
    assert tuple(row[2] for row in rows) == SQLITE_MIGRATION_CHECKSUMS
    assert store._connection.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    health = store.health()
    assert (health.ok, health.mode, health.migration_checksums_ok, health.events) == (True, "file", True, ())


def test_incremental_indexing_reads_only_appended_lines(store, session_path):
    first = store.index_file(session_path)
    assert (first.mode, first.entries_indexed, first.issues) == ("full", 16, 0)
    assert first.indexed_offset == session_path.stat().st_size
    assert store.index_file(session_path).mode == "unchanged"
    entry = append_pi_entry(session_path, "message", _user("please also handle semicolons"))
    second = store.index_file(session_path)
    assert (second.mode, second.entries_indexed) == ("incremental", 1)
    assert second.indexed_offset == session_path.stat().st_size
    hits = store.search(CODING_ID, "semicolons")
    assert [hit.entry_id for hit in hits] == [entry.id]
    assert "semicolons" in hits[0].excerpt


def test_search_ranks_matches_and_ignores_query_syntax(store, session_path):
    store.index_file(session_path)
    hits = store.search(CODING_ID, "trim")
    assert {hit.entry_id for hit in hits} >= {"a000000c", "a000000d"}
    assert all(hit.session_id == CODING_ID for hit in hits)
    assert store.search(CODING_ID, 'NEAR( "unbalanced') == ()
    assert store.search(CODING_ID, "   ") == ()
    assert store.search("other-session", "trim") == ()


def test_torn_tail_is_not_indexed_until_complete(store, session_path):
    store.index_file(session_path)
    size = session_path.stat().st_size
    with session_path.open("ab") as handle:
        handle.write(
            b'{"type":"message","id":"abcdef01","parentId":"a0000010","timestamp":"t","message":{"ro'
        )
    torn = store.index_file(session_path)
    assert (torn.mode, torn.entries_indexed, torn.indexed_offset, torn.issues) == ("incremental", 0, size, 1)
    with session_path.open("ab") as handle:
        handle.write(b'le":"user","content":"completed later","timestamp":5}}\n')
    done = store.index_file(session_path)
    assert (done.mode, done.entries_indexed) == ("incremental", 1)
    assert [hit.entry_id for hit in store.search(CODING_ID, "completed later")] == ["abcdef01"]


def test_a_replaced_file_is_indexed_again_in_full(store, session_path):
    store.index_file(session_path)
    data = session_path.read_bytes().replace(b"Fix the failing parser", b"Fix the flaky lexer")
    session_path.write_bytes(data)
    report = store.index_file(session_path)
    assert report.mode == "full"
    assert report.reason == "the file changed before the indexed offset"
    assert [hit.entry_id for hit in store.search(CODING_ID, "lexer")] == ["a0000003"]
    assert store.search(CODING_ID, "parser test") == ()


def test_pins_and_memory_are_events_in_the_session_and_survive_deleting_the_store(backend, session_path):
    store = backend.open()
    append_pin_event(session_path, "a0000003", label="task")
    append_pin_event(session_path, "a0000007")
    append_unpin_event(session_path, "a0000007")
    added = append_memory_event(session_path, text="Project uses vitest, not jest")
    gone = append_memory_event(session_path, text="temporary note")
    append_memory_event(session_path, remove_item_id=gone.data["data"]["itemId"])
    store.index_file(session_path)
    pins = store.pins(CODING_ID)
    assert [(pin.entry_id, pin.label) for pin in pins] == [("a0000003", "task")]
    assert [item.text for item in store.memory_items(CODING_ID)] == ["Project uses vitest, not jest"]
    assert store.memory_items(CODING_ID)[0].event_entry_id == added.id
    store.close()
    backend.wipe()
    fresh = backend.open()
    assert fresh.pins(CODING_ID) == ()
    fresh.index_file(session_path)
    assert fresh.pins(CODING_ID) == pins
    assert [item.text for item in fresh.memory_items(CODING_ID)] == ["Project uses vitest, not jest"]


def test_rebuild_deletes_and_replays(store, session_path):
    store.index_file(session_path)
    store.record_manifest(CODING_ID, '{"plan":1}')
    before = store.storage()
    reports = store.rebuild([session_path])
    assert [report.mode for report in reports] == ["full"]
    after = store.storage()
    assert (after.entries, after.sessions) == (before.entries, before.sessions)
    assert after.manifests == 0
    assert "derived-store-rebuilt" in store.health().events
    assert store.rebuild_session(session_path).reason == "rebuild"


def test_manifest_retention_keeps_the_newest(store):
    for number in range(MANIFEST_RETENTION + 3):
        store.record_manifest("s", f'{{"n":{number}}}', leaf_id="00000001")
    kept = store.manifests("s")
    assert len(kept) == MANIFEST_RETENTION == 128
    assert kept[0].body == f'{{"n":{MANIFEST_RETENTION + 2}}}'
    assert kept[-1].body == '{"n":3}'
    assert store.manifests("other") == ()


def test_calibration_retention_is_per_profile(store):
    for number in range(CALIBRATION_RETENTION + 5):
        store.add_calibration_sample("openai:gpt-5", estimated=100, actual=100 + number)
    store.add_calibration_sample("anthropic:claude", estimated=10, actual=12)
    samples = store.calibration_samples("openai:gpt-5")
    assert len(samples) == CALIBRATION_RETENTION == 200
    assert samples[0].actual == 105
    assert [(s.estimated, s.actual) for s in store.calibration_samples("anthropic:claude")] == [(10, 12)]
    with pytest.raises(DerivedStoreError) as caught:
        store.add_calibration_sample("p", estimated=0, actual=5)
    assert caught.value.code == "calibration-sample-invalid"
    assert len(store.calibration_samples("p")) == 0


def test_a_calibration_source_is_recorded_once_even_after_its_sample_ages_out(store):
    assert store.add_calibration_sample("m", estimated=100, actual=130, source="s:e1") is True
    assert store.add_calibration_sample("m", estimated=100, actual=130, source="s:e1") is False
    assert store.add_calibration_sample("other", estimated=100, actual=130, source="s:e1") is True
    for number in range(CALIBRATION_RETENTION):
        store.add_calibration_sample("m", estimated=50, actual=60, source=f"s:n{number}")
    assert {(s.estimated, s.actual) for s in store.calibration_samples("m")} == {(50, 60)}  # aged out
    assert store.add_calibration_sample("m", estimated=100, actual=130, source="s:e1") is False
    assert len(store.calibration_samples("m")) == CALIBRATION_RETENTION
    assert "s:e1" in store.calibration_sources("m")
    assert store.calibration_sources("other") == frozenset({"s:e1"})
    assert store.add_calibration_sample("m", estimated=100, actual=130) is True  # no source: always


def test_calibration_sources_are_bounded_per_profile(store):
    for number in range(CALIBRATION_SOURCE_RETENTION + 3):
        store.add_calibration_sample("m", estimated=10, actual=11, source=f"s:{number}")
    sources = store.calibration_sources("m")
    assert len(sources) == CALIBRATION_SOURCE_RETENTION
    assert "s:0" not in sources
    assert f"s:{CALIBRATION_SOURCE_RETENTION + 2}" in sources


# what each later migration did, undone, so a store can be taken back to what an older release wrote
_UNDO = {
    2: ("DROP TABLE calibration_sources",),
    3: ("DROP TABLE summaries",),
    4: (
        "DROP INDEX manifests_by_write_id",
        "ALTER TABLE manifests DROP COLUMN write_id",
        "DROP INDEX calibration_samples_by_write_id",
        "ALTER TABLE calibration_samples DROP COLUMN write_id",
    ),
    5: (),  # PostgreSQL's one-entry-table step: nothing changes here but the record
}
_ADDED_AFTER = {version: sorted(step for step in _UNDO if step > version) for version in (1, 2, 3, 4)}


@pytest.mark.parametrize("version", sorted(_ADDED_AFTER))
def test_a_store_of_an_older_schema_is_migrated_forward_with_its_data(tmp_path, session_path, version):
    db = tmp_path / "state" / "derived.sqlite3"
    store = open_derived_store(db)
    store.index_file(session_path)
    store.add_calibration_sample("m", estimated=100, actual=120)
    store.record_manifest("coding", '{"older": true}')
    store.close()
    with closing(sqlite3.connect(db)) as connection, connection:  # as that release wrote it
        for step in reversed(_ADDED_AFTER[version]):
            for statement in _UNDO[step]:
                connection.execute(statement)
        connection.execute("DELETE FROM schema_migrations WHERE version > ?", (version,))
    store = open_derived_store(db)
    assert store.health().events == ()
    assert store.health().migration_checksums_ok
    assert store.health().schema_version == MIGRATIONS[-1].version
    assert [(s.estimated, s.actual) for s in store.calibration_samples("m")] == [(100, 120)]
    assert store.index_file(session_path).entries_indexed == 0  # nothing to index again
    assert store.add_calibration_sample("m", estimated=100, actual=120, source="x") is True
    store.put_summary(_summary("coding"))
    assert store.summaries("coding") == (_summary("coding"),)
    newer = store.record_manifest("coding", '{"newer": true}')
    assert [(m.id, m.body) for m in store.manifests("coding")] == [
        (newer, '{"newer": true}'),
        (newer - 1, '{"older": true}'),
    ]
    store.close()


def test_large_tool_outputs_become_content_addressed_artifacts(tmp_path, store):
    path = tmp_path / "big.jsonl"
    create_pi_session(path, cwd="/p", session_id="big")
    output = "line of build output\n" * 1000
    result = {
        "message": {
            "role": "toolResult",
            "toolCallId": "c1",
            "toolName": "bash",
            "content": [{"type": "text", "text": output}],
            "isError": False,
            "timestamp": 1,
        }
    }
    first = append_pi_entry(path, "message", result)
    second = append_pi_entry(path, "message", result)
    report = store.index_file(path)
    assert report.artifacts_stored == 2
    expected_id = hashlib.sha256(output.encode()).hexdigest()
    assert store.artifacts_for_entry("big", first.id) == (expected_id,)
    assert store.artifacts_for_entry("big", second.id) == (expected_id,)
    assert store.get_artifact(expected_id) == output.encode()
    assert store.storage().artifacts == 1
    assert store.put_artifact(b"xyz") == hashlib.sha256(b"xyz").hexdigest()
    assert store.get_artifact("0" * 64) is None


def test_a_corrupt_store_is_deleted_and_rebuilt(tmp_path, session_path):
    db = tmp_path / "state" / "derived.sqlite3"
    store = open_derived_store(db)
    store.index_file(session_path)
    store.close()
    data = bytearray(db.read_bytes())
    data[100:] = b"\xa5" * (len(data) - 100)  # every page damaged; the header still says it is ours
    db.write_bytes(bytes(data))
    store = open_derived_store(db)
    assert store.health().events == ("derived-store-corrupt-rebuilt",)
    assert store.mode == "file"
    assert store.index_file(session_path).entries_indexed == 16
    assert db.read_bytes().startswith(b"SQLite format 3\x00")
    store.close()


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(None, id="a Pi session file"),
        pytest.param(b"this is not a database at all" * 100, id="any other file"),
        pytest.param(b"SQLite format 3\x00" + b"\x00" * 20, id="a truncated database header"),
        pytest.param(b"x" * 68 + b"DS4C" + b"x" * 100, id="our mark without a database header"),
    ],
)
def test_a_store_path_naming_a_file_that_is_not_a_store_is_refused_untouched(tmp_path, session_path, content):
    target = session_path if content is None else tmp_path / "sessions" / "notes.bin"
    if content is not None:
        target.write_bytes(content)
    before = _snapshot(target.parent)
    with pytest.raises(DerivedStoreError) as caught:
        open_derived_store(target)
    assert caught.value.code == "derived-store-path-foreign"
    assert _snapshot(target.parent) == before


def test_another_programs_sqlite_database_is_refused_untouched(tmp_path):
    db = tmp_path / "app" / "app.sqlite3"
    db.parent.mkdir()
    with closing(sqlite3.connect(db)) as connection, connection:
        connection.execute("CREATE TABLE notes (body TEXT)")
        connection.execute("INSERT INTO notes VALUES ('keep me')")
    before = _snapshot(db.parent)
    with pytest.raises(DerivedStoreError) as caught:
        open_derived_store(db)
    assert caught.value.code == "derived-store-path-foreign"
    assert _snapshot(db.parent) == before
    with closing(sqlite3.connect(db)) as connection:
        assert connection.execute("SELECT name FROM sqlite_master").fetchall() == [("notes",)]
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("delete",)


def test_a_database_marked_by_another_program_is_refused_even_when_empty(tmp_path):
    db = tmp_path / "app.sqlite3"
    with closing(sqlite3.connect(db)) as connection:
        connection.execute("PRAGMA application_id = 1234")
        connection.execute("VACUUM")  # writes the header
    before = db.read_bytes()
    with pytest.raises(DerivedStoreError) as caught:
        open_derived_store(db)
    assert caught.value.code == "derived-store-path-foreign"
    assert db.read_bytes() == before


def test_an_empty_file_or_database_and_an_unmarked_store_of_ours_are_adopted(tmp_path, session_path):
    empty_file = tmp_path / "empty.sqlite3"
    empty_file.touch()
    empty_database = tmp_path / "blank.sqlite3"
    with closing(sqlite3.connect(empty_database)) as connection:
        connection.execute("VACUUM")
    unmarked = tmp_path / "older.sqlite3"
    open_derived_store(unmarked).close()
    with closing(sqlite3.connect(unmarked)) as connection:
        connection.execute("PRAGMA application_id = 0")  # as stores were written before they were marked
    for path in (empty_file, empty_database, unmarked):
        store = open_derived_store(path)
        assert store.index_file(session_path).entries_indexed > 0
        assert store.health().events == ()
        store.close()
        with closing(sqlite3.connect(path)) as connection:
            assert connection.execute("PRAGMA application_id").fetchone() == (0x44533443,)


def test_a_store_path_that_is_a_directory_is_refused(tmp_path):
    directory = tmp_path / "state"
    directory.mkdir()
    with pytest.raises(DerivedStoreError) as caught:
        open_derived_store(directory)
    assert caught.value.code == "derived-store-path-unreadable"


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param("UPDATE schema_migrations SET checksum = 'tampered'", id="foreign checksum"),
        pytest.param(
            "DELETE FROM schema_migrations WHERE version = 3", id="half-applied summaries migration"
        ),
    ],
)
def test_a_foreign_or_half_applied_schema_is_treated_as_corruption(tmp_path, session_path, tamper):
    db = tmp_path / "state" / "derived.sqlite3"
    store = open_derived_store(db)
    store.put_summary(_summary("coding"))
    store.close()
    with closing(sqlite3.connect(db)) as connection, connection:
        connection.execute(tamper)
    store = open_derived_store(db)
    assert store.health().events == ("derived-store-corrupt-rebuilt",)
    assert store.health().migration_checksums_ok
    assert store.health().schema_version == MIGRATIONS[-1].version
    assert store.summaries("coding") == ()  # a rebuilt store starts empty; the model is asked again
    store.close()


def test_a_locked_database_never_blocks_the_host(tmp_path, session_path):
    db = tmp_path / "state" / "derived.sqlite3"
    open_derived_store(db).close()
    blocker = sqlite3.connect(db, isolation_level=None)
    blocker.execute("PRAGMA locking_mode = EXCLUSIVE")
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        before = db.read_bytes()
        started = time.perf_counter()
        store = open_derived_store(db, busy_timeout=0.05)
        report = store.index_file(session_path)
        elapsed = time.perf_counter() - started
        assert store.mode == "memory"
        assert "derived-store-locked" in store.health().events
        assert report.entries_indexed == 16
        assert store.storage().path == ":memory:"
        assert elapsed < 2.0
        assert db.read_bytes() == before
        store.close()
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()


def test_untrusted_or_symlinked_locations_are_refused(tmp_path):
    trusted = tmp_path / "trusted"
    trusted.mkdir()
    with pytest.raises(UntrustedPathError) as outside:
        open_derived_store(tmp_path / "elsewhere" / "d.sqlite3", trusted_roots=[trusted])
    assert outside.value.code == "path-untrusted"
    assert not (tmp_path / "elsewhere").exists()
    escape = trusted / "escape"
    escape.symlink_to(tmp_path / "elsewhere2", target_is_directory=True)
    with pytest.raises(UntrustedPathError) as via_link:
        open_derived_store(escape / "d.sqlite3", trusted_roots=[trusted])
    assert via_link.value.code == "path-untrusted"
    target = trusted / "real.sqlite3"
    target.write_bytes(b"")
    (trusted / "link.sqlite3").symlink_to(target)
    with pytest.raises(UntrustedPathError) as linked:
        open_derived_store(trusted / "link.sqlite3", trusted_roots=[trusted])
    assert linked.value.code == "path-symlink-refused"
    assert target.read_bytes() == b""


def test_unreadable_source_is_reported_with_a_code(store, tmp_path):
    with pytest.raises(DerivedStoreError) as caught:
        store.index_file(tmp_path / "missing.jsonl")
    assert caught.value.code == "derived-store-source-unreadable"


def test_v1_session_incremental_ids_match_a_full_read(store, tmp_path):
    path = tmp_path / "legacy.jsonl"
    shutil.copy(FIXTURES / "v1-legacy.jsonl", path)
    store.index_file(path)
    entry = append_pi_entry(path, "message", _user("incremental on legacy"))
    assert store.index_file(path).mode == "incremental"
    # the second append reuses the tree shape kept from the first incremental pass
    second = append_pi_entry(path, "message", _user("second legacy append"))
    assert (store.index_file(path).mode, store.indexed_offset(read_pi_session(path).session_id)) == (
        "incremental",
        path.stat().st_size,
    )
    session = read_pi_session(path)
    assert [hit.entry_id for hit in store.search(session.session_id, "incremental legacy")] == [entry.id]
    assert [hit.entry_id for hit in store.search(session.session_id, "second")] == [second.id]
    assert second.parent_id == entry.id


def test_threads_sharing_one_store_are_serialised(store, tmp_path):
    errors = []

    def worker(number):
        try:
            for index in range(20):
                store.add_calibration_sample(f"profile-{number}", estimated=100, actual=100 + index)
                store.record_manifest(f"s-{number}", "{}")
        except Exception as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(number,)) for number in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert [len(store.calibration_samples(f"profile-{n}")) for n in range(4)] == [20, 20, 20, 20]
    assert store.storage().manifests == 80
