"""Hostile input and faults at the Pi reader, the adapter, the workspace and the store (issue 22).

Every case here ends in a documented error or issue with a stable code, never a hang, a raw
``TypeError``/``ValueError``/``RecursionError`` or silently lost state.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ds4_context_core import HistoryError
from ds4_context_core.history import HISTORY_VALIDATION_FAILED
from ds4_context_engine._exceptions import (
    DerivedStoreError,
    PiSessionError,
    PiSessionWriteError,
    UntrustedPathError,
)
from ds4_context_engine.commands import ContextWorkspace
from ds4_context_engine.pi import (
    DEFAULT_MAX_PI_SESSION_ENTRIES,
    KNOWN_PI_ENTRY_TYPES,
    MAX_PI_ISSUES_PER_CODE,
    MAX_PI_JSON_DEPTH,
    MEMORY_CUSTOM_TYPE,
    PI_ISSUE_CODES,
    PIN_CUSTOM_TYPE,
    UNPIN_CUSTOM_TYPE,
    PiSessionAdapter,
    append_pi_entry,
    build_pi_context,
    create_pi_session,
    extend_pi_session,
    pi_index_record,
    read_pi_session,
    read_pi_session_bytes,
)
from ds4_context_engine.store import open_derived_store, replay_session_events

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="FIFOs and fork-free processes are POSIX")


async def _transport(request):
    return {"role": "assistant", "content": "ok"}


@pytest.fixture(autouse=True)
def _stores_are_closed(monkeypatch):
    """Each store a test opens is closed after it (Python 3.13 warns about an unclosed database)."""
    opened = []
    real = open_derived_store

    def tracking(*args, **kwargs):
        store = real(*args, **kwargs)
        opened.append(store)
        return store

    monkeypatch.setitem(globals(), "open_derived_store", tracking)
    yield
    for store in opened:
        store.close()


def _header(cwd: str, session_id: str = "s1") -> bytes:
    header = {
        "type": "session",
        "version": 3,
        "id": session_id,
        "timestamp": "2026-01-01T00:00:00Z",
        "cwd": cwd,
    }
    return json.dumps(header).encode() + b"\n"


def _line(entry_id: str, parent: str | None, message: object) -> bytes:
    entry = {"type": "message", "id": entry_id, "parentId": parent, "timestamp": "t", "message": message}
    return json.dumps(entry).encode() + b"\n"


class _Hung(BaseException):
    """Raised by the alarm; not an ``OSError``, so no handler under test can mistake it for a refusal."""


@pytest.fixture
def no_hang():
    """Turns a call blocked for seconds into ``_Hung`` (the bug was a hang forever)."""

    def expire(signum, frame):
        raise _Hung("blocked on a non-regular file")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(5)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


# -- item 4: malformed values and deep nesting -----------------------------------------------------


@pytest.mark.parametrize("role", [["user"], {"a": 1}, 7, None, True])
def test_a_message_whose_role_is_not_a_string_is_an_issue_not_a_type_error(tmp_path, role):
    data = _header(str(tmp_path)) + _line("a", None, {"role": "user", "content": "hi"})
    data += _line("b", "a", {"role": role, "content": "x"})
    session = read_pi_session_bytes(data)
    context = build_pi_context(session)
    assert [message.source_entry_id for message in context.messages] == ["a"]
    assert [(issue.code, issue.entry_id) for issue in context.issues] == [("pi-message-role-unknown", "b")]
    assert context.excluded_entry_ids == ("b",)


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("depth", [MAX_PI_JSON_DEPTH + 1, 100_000])
def test_a_line_nested_deeper_than_the_limit_is_an_issue_and_the_rest_is_read(tmp_path, depth):
    deep = (
        b'{"type":"message","id":"d","parentId":"a","message":{"role":"user","content":'
        + _nested(depth).encode()
        + b"}}\n"
    )
    data = _header(str(tmp_path)) + _line("a", None, {"role": "user", "content": "hi"}) + deep
    data += _line("c", "a", {"role": "user", "content": "after"})
    session = read_pi_session_bytes(data)
    assert [entry.id for entry in session.entries] == ["a", "c"]
    assert [(issue.code, issue.line) for issue in session.issues] == [("pi-line-too-deep", 3)]


def test_a_line_exactly_at_the_nesting_limit_is_read(tmp_path):
    # the entry object is level 1 and the message level 2, so content may nest MAX - 2 levels more
    content = _nested(MAX_PI_JSON_DEPTH - 2)
    line = b'{"type":"message","id":"d","parentId":null,"message":{"role":"user","content":'
    session = read_pi_session_bytes(_header(str(tmp_path)) + line + content.encode() + b"}}\n")
    assert [entry.id for entry in session.entries] == ["d"]
    assert session.issues == ()


def test_nesting_inside_strings_does_not_count(tmp_path):
    text = "[{" * (MAX_PI_JSON_DEPTH * 4)
    session = read_pi_session_bytes(
        _header(str(tmp_path)) + _line("a", None, {"role": "user", "content": text})
    )
    assert session.issues == ()
    assert build_pi_context(session).messages[0].blocks[0].text == text


def test_a_header_nested_too_deep_is_a_header_error(tmp_path):
    header = b'{"type":"session","version":3,"id":"s","cwd":"/","x":' + _nested(100_000).encode() + b"}\n"
    with pytest.raises(PiSessionError) as caught:
        read_pi_session_bytes(header)
    assert caught.value.code == "pi-session-header-invalid"


def test_the_adapter_and_store_survive_a_deeply_nested_line(tmp_path):
    path = tmp_path / "session.jsonl"
    deep = b'{"type":"custom","id":"d","parentId":"a","data":' + _nested(50_000).encode() + b"}\n"
    path.write_bytes(_header(str(tmp_path)) + _line("a", None, {"role": "user", "content": "hi"}) + deep)
    adapter = PiSessionAdapter(path, trusted_roots=[tmp_path], transport=_transport)
    with pytest.raises(PiSessionError) as caught:
        adapter.snapshot_history()
    assert caught.value.code == "pi-session-damaged"
    store = open_derived_store(None)
    report = store.index_file(path)
    assert (report.entries_indexed, report.issues) == (1, 1)


# -- item 5: FIFOs and other non-regular files -------------------------------------------------------


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "session.jsonl"
    os.mkfifo(path, 0o600)
    return path


def test_the_reader_refuses_a_fifo_without_blocking(fifo, no_hang):
    with pytest.raises(PiSessionError) as caught:
        read_pi_session(fifo)
    assert caught.value.code == "pi-session-unreadable"


def test_the_adapter_and_workspace_refuse_a_fifo_without_blocking(fifo, no_hang):
    adapter = PiSessionAdapter(fifo, trusted_roots=[fifo.parent], transport=_transport)
    with pytest.raises(PiSessionError) as caught:
        adapter.snapshot_history()
    assert caught.value.code == "pi-session-unreadable"
    with pytest.raises(PiSessionError) as caught:
        ContextWorkspace.open(fifo, no_store=True)
    assert caught.value.code == "pi-session-unreadable"


def test_the_store_refuses_a_fifo_session_without_blocking(fifo, store, no_hang):
    # every backend (the ``store`` fixture of conftest.py: SQLite and PostgreSQL)
    with pytest.raises(DerivedStoreError) as caught:
        store.index_file(fifo)
    assert caught.value.code == "derived-store-source-unreadable"
    with pytest.raises(PiSessionError) as caught:
        store.rebuild_session(fifo)
    assert caught.value.code == "pi-session-unreadable"


def test_appending_to_a_fifo_is_refused_without_blocking(fifo, no_hang):
    with pytest.raises(PiSessionWriteError) as caught:
        append_pi_entry(fifo, "label", {"targetId": "x", "label": "y"})
    assert caught.value.code == "pi-session-unwritable"


def test_a_fifo_at_the_store_path_is_refused_without_blocking(tmp_path, no_hang):
    path = tmp_path / "state" / "derived.sqlite3"
    path.parent.mkdir(mode=0o700)
    os.mkfifo(path, 0o600)
    with pytest.raises(DerivedStoreError) as caught:
        open_derived_store(path)
    assert caught.value.code == "derived-store-path-unreadable"
    assert path.exists()
    assert not path.is_file()  # left untouched


def test_a_directory_at_the_store_path_is_refused(tmp_path):
    path = tmp_path / "derived.sqlite3"
    path.mkdir()
    with pytest.raises(DerivedStoreError) as caught:
        open_derived_store(path)
    assert caught.value.code == "derived-store-path-unreadable"


# -- item 9: the session cwd as project root ------------------------------------------------------------


def test_a_cwd_with_nul_is_an_untrusted_path_error_not_a_value_error(tmp_path):
    path = tmp_path / "session.jsonl"
    path.write_bytes(_header(f"{tmp_path}/a\u0000b") + _line("a", None, {"role": "user", "content": "hi"}))
    adapter = PiSessionAdapter(path, trusted_roots=[tmp_path], transport=_transport)
    for call in (adapter.snapshot_history, adapter.trusted_project_root):
        with pytest.raises(UntrustedPathError) as caught:
            call()
        assert caught.value.code == "trusted-project-root-invalid"
    assert [d.code for d in adapter.diagnostics()][:1] == ["canonical-history-read-failed"]


@pytest.mark.parametrize("kind", ["file", "missing"])
def test_a_cwd_that_is_not_a_directory_is_not_trusted(tmp_path, kind):
    cwd = tmp_path / "project"
    if kind == "file":
        cwd.write_text("not a directory")
    path = tmp_path / "session.jsonl"
    path.write_bytes(_header(str(cwd)) + _line("a", None, {"role": "user", "content": "hi"}))
    adapter = PiSessionAdapter(path, trusted_roots=[tmp_path], transport=_transport)
    with pytest.raises(UntrustedPathError) as caught:
        adapter.snapshot_history()
    assert caught.value.code == "trusted-project-root-not-directory"
    cwd.unlink(missing_ok=True)
    cwd.mkdir()
    assert adapter.snapshot_history().project_root == str(cwd.resolve())


# -- item 10: shutdown ---------------------------------------------------------------------------------


def test_shutdown_releases_the_parsed_session_and_is_idempotent(tmp_path):
    path = tmp_path / "session.jsonl"
    path.write_bytes(_header(str(tmp_path)) + _line("a", None, {"role": "user", "content": "hi"}))
    adapter = PiSessionAdapter(path, trusted_roots=[tmp_path], transport=_transport)
    adapter.snapshot_history()
    assert not hasattr(adapter, "_session")  # the attribute the old shutdown cleared never existed
    anyio.run(adapter.shutdown)
    anyio.run(adapter.shutdown)
    assert adapter._view._read is None  # nothing parsed is kept alive by a closed adapter
    assert not hasattr(adapter, "_session")
    assert [d.code for d in adapter.diagnostics()].count("adapter-closed") == 1


# -- item 7: another process rebuilding the store ------------------------------------------------------

_REBUILDER = textwrap.dedent(
    """
    import sys
    from ds4_context_engine.store import open_derived_store, replay_session_events

    store = open_derived_store(sys.argv[1], busy_timeout=5.0)
    for _ in range(int(sys.argv[3])):
        store.rebuild([sys.argv[2]])
    print(",".join(store.health().events))
    store.close()
    """
)


def _session_file(tmp_path: Path) -> Path:
    path = tmp_path / "session.jsonl"
    create_pi_session(path, cwd=str(tmp_path), session_id="work")
    append_pi_entry(path, "message", {"message": {"role": "user", "content": "index me", "timestamp": 1}})
    return path


def _rebuild_elsewhere(store_path: Path, session: Path, times: int = 1) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _REBUILDER, str(store_path), str(session), str(times)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


def test_writes_after_another_process_rebuilt_the_store_are_kept(tmp_path):
    session = _session_file(tmp_path)
    store_path = tmp_path / "state" / "derived.sqlite3"
    store = open_derived_store(store_path)
    store.index_file(session)
    _rebuild_elsewhere(store_path, session)
    assert store.add_calibration_sample("openai/gpt", estimated=10, actual=12, source="work:a")
    store.record_manifest("work", '{"plan": 1}', leaf_id="a")
    store.close()
    # what a fresh process sees: the samples and the manifest written after the rebuild are there
    fresh = open_derived_store(store_path)
    assert [(s.estimated, s.actual) for s in fresh.calibration_samples("openai/gpt")] == [(10, 12)]
    assert [m.body for m in fresh.manifests("work")] == ['{"plan": 1}']
    fresh.close()


_REPLACER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from ds4_context_engine.store import open_derived_store, replay_session_events

    for suffix in ("", "-wal", "-shm"):
        Path(sys.argv[1] + suffix).unlink(missing_ok=True)
    store = open_derived_store(sys.argv[1])
    store.index_file(sys.argv[2])
    store.close()
    """
)


def test_a_store_file_replaced_by_another_process_is_reopened(tmp_path):
    session = _session_file(tmp_path)
    store_path = tmp_path / "derived.sqlite3"
    store = open_derived_store(store_path)
    store.index_file(session)
    subprocess.run([sys.executable, "-c", _REPLACER, str(store_path), str(session)], check=True, timeout=120)
    assert [hit.entry_id for hit in store.search("work", "index")]  # read from the new file
    assert store.add_calibration_sample("openai/gpt", estimated=10, actual=12)
    assert store.health().events == ("derived-store-reopened",)
    store.close()
    fresh = open_derived_store(store_path)
    assert len(fresh.calibration_samples("openai/gpt")) == 1  # written into the file everybody sees
    fresh.close()


def test_concurrent_rebuilds_never_report_corruption(tmp_path):
    session = _session_file(tmp_path)
    store_path = tmp_path / "derived.sqlite3"
    open_derived_store(store_path).close()
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", _REBUILDER, str(store_path), str(session), "15"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outputs = [run.communicate(timeout=300) for run in runs]
    assert [run.returncode for run in runs] == [0, 0, 0, 0], [err[-400:] for _, err in outputs]
    for stdout, _ in outputs:
        events = stdout.strip().split(",")
        assert "derived-store-corrupt-rebuilt" not in events
        assert events.count("derived-store-rebuilt") == 15
    with contextlib.closing(sqlite3.connect(store_path)) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    store = open_derived_store(store_path)
    assert store.index_file(session).mode in ("unchanged", "full")
    assert [hit.entry_id for hit in store.search("work", "index")]
    store.close()


# -- item 6: memory bounded however small the entries ----------------------------------------------------


def _tiny_entries(count: int, entry_type: str = "label") -> bytes:
    return b"".join(b'{"type":"%s","id":"%x"}\n' % (entry_type.encode(), number) for number in range(count))


def test_a_session_with_more_entries_than_the_limit_is_refused(tmp_path):
    path = tmp_path / "session.jsonl"
    path.write_bytes(_header(str(tmp_path)) + _tiny_entries(11))
    assert len(read_pi_session(path, max_entries=11).entries) == 11
    with pytest.raises(PiSessionError) as caught:
        read_pi_session(path, max_entries=10)
    assert caught.value.code == "pi-session-too-many-entries"
    assert DEFAULT_MAX_PI_SESSION_ENTRIES == 1_000_000


def test_growing_past_the_entry_limit_is_refused_too(tmp_path):
    session = read_pi_session_bytes(_header(str(tmp_path)) + _tiny_entries(5), max_entries=5)
    with pytest.raises(PiSessionError) as caught:
        extend_pi_session(session, b'{"type":"label","id":"new"}\n', max_entries=5)
    assert caught.value.code == "pi-session-too-many-entries"


def test_issues_are_kept_up_to_a_bound_per_code_and_the_rest_counted(tmp_path):
    garbage = b"not json\n" * (MAX_PI_ISSUES_PER_CODE + 50)
    data = _header(str(tmp_path)) + garbage + _tiny_entries(MAX_PI_ISSUES_PER_CODE + 7, "unknown-kind")
    session = read_pi_session_bytes(data)
    codes = [issue.code for issue in session.issues]
    assert codes.count("pi-line-corrupt") == MAX_PI_ISSUES_PER_CODE
    assert codes.count("pi-entry-type-unknown") == MAX_PI_ISSUES_PER_CODE
    assert session.issues_omitted == 57
    # an append keeps the bound, and a damaged line later is still reported under its own code
    grown = extend_pi_session(session, b"also not json\n" + b'{"type":"label","id":"dup"}\n' * 2)
    codes = [issue.code for issue in grown.issues]
    assert codes.count("pi-line-corrupt") == MAX_PI_ISSUES_PER_CODE
    assert codes.count("pi-entry-id-duplicate") == 1
    assert grown.issues_omitted == 58


# -- fuzzing: whatever the lines hold, only documented outcomes ---------------------------------------

_json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
_json = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
)
_entry_ids = st.sampled_from(["a", "b", "c", "d"])
_pi_values = _json | st.sampled_from(["user", "assistant", "toolResult", "bashExecution", "custom", "text"])
_blocks = st.lists(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["text", "thinking", "image", "toolCall"]) | _json},
        optional={
            "text": _pi_values,
            "thinking": _pi_values,
            "id": _pi_values,
            "name": _pi_values,
            "arguments": _json,
            "data": _pi_values,
            "mimeType": _pi_values,
        },
    ),
    max_size=3,
)
_messages = st.fixed_dictionaries(
    {"role": _pi_values | st.sampled_from(["branchSummary", "compactionSummary", "hookMessage"])},
    optional={
        "content": _blocks | _pi_values,
        "toolCallId": _pi_values,
        "toolName": _pi_values,
        "isError": _json,
        "command": _pi_values,
        "output": _pi_values,
        "exitCode": _json,
        "summary": _pi_values,
        "provider": _pi_values,
        "model": _pi_values,
        "timestamp": _json,
    },
)
_entries = st.fixed_dictionaries(
    {"type": st.sampled_from([*KNOWN_PI_ENTRY_TYPES, "unknown"]) | _json, "id": _entry_ids | _json},
    optional={
        "parentId": _entry_ids | _json,
        "message": _messages | _json,
        "customType": st.sampled_from([PIN_CUSTOM_TYPE, UNPIN_CUSTOM_TYPE, MEMORY_CUSTOM_TYPE]) | _json,
        "data": st.fixed_dictionaries(
            {},
            optional={
                "entryId": _pi_values,
                "itemId": _pi_values,
                "op": st.sampled_from(["add", "remove"]) | _json,
                "text": _pi_values,
                "label": _pi_values,
            },
        )
        | _json,
        "summary": _pi_values,
        "content": _blocks | _pi_values,
        "firstKeptEntryId": _entry_ids | _json,
        "targetId": _entry_ids | _json,
        "label": _pi_values,
        "provider": _pi_values,
        "modelId": _pi_values,
        "thinkingLevel": _pi_values,
        "timestamp": _json,
    },
)
_lines = st.lists(
    st.one_of(_entries.map(lambda entry: json.dumps(entry).encode()), st.binary(max_size=12)), max_size=8
)


def _snapshot_outcome(adapter: PiSessionAdapter) -> str:
    """``snapshot``, or the code of the documented error the adapter raised."""
    try:
        snapshot = adapter.snapshot_history()
    except (PiSessionError, HistoryError) as error:
        return error.code
    return "snapshot" if snapshot.session_id == "fz" else "wrong session"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=_lines, version=st.sampled_from([1, 2, 3]), torn=st.booleans())
def test_fuzzed_lines_give_a_session_a_context_and_records_never_an_exception(
    tmp_path_factory, lines, version, torn
):
    directory = tmp_path_factory.mktemp("fuzz")
    header = json.dumps(
        {"type": "session", "version": version, "id": "fz", "timestamp": "", "cwd": str(directory)}
    )
    data = header.encode() + b"\n" + b"\n".join(line.replace(b"\n", b" ") for line in lines)
    data += b"" if torn else b"\n"
    session = read_pi_session_bytes(data)
    assert {issue.code for issue in session.issues} <= set(PI_ISSUE_CODES)
    for leaf in (None, *session.leaves()):
        context = build_pi_context(session, leaf, pinned_entry_ids=["a"])
        assert {issue.code for issue in context.issues} <= set(PI_ISSUE_CODES)
    records = [pi_index_record(entry) for entry in session.entries]
    assert [record.shape.entry_id for record in records] == [entry.id for entry in session.entries]
    assert replay_session_events("fz", session.entries) is not None
    # the adapter either snapshots or raises one of its documented errors
    path = directory / "session.jsonl"
    path.write_bytes(data)
    adapter = PiSessionAdapter(path, trusted_roots=[directory], transport=_transport)
    assert _snapshot_outcome(adapter) in ("snapshot", "pi-session-damaged", HISTORY_VALIDATION_FAILED)
    store = open_derived_store(None)
    assert store.index_file(path).entries_indexed == len(session.entries)
    store.close()


# -- files swapped under a reader that already read them ---------------------------------------------------


def test_a_fifo_swapped_in_after_a_read_is_refused_without_blocking(tmp_path, no_hang):
    session = _session_file(tmp_path)
    adapter = PiSessionAdapter(session, trusted_roots=[tmp_path], transport=_transport)
    adapter.snapshot_history()
    workspace = ContextWorkspace.open(session, store_path=tmp_path / "derived.sqlite3")
    session.unlink()
    os.mkfifo(session, 0o600)
    with pytest.raises(PiSessionError) as caught:
        adapter.snapshot_history()
    assert caught.value.code == "pi-session-unreadable"
    with pytest.raises(PiSessionError) as caught:
        workspace.refresh()
    assert caught.value.code == "pi-session-unreadable"
    with pytest.raises(DerivedStoreError) as caught:
        workspace.store.index_file(session)
    assert caught.value.code == "derived-store-source-unreadable"
    workspace.close()


def test_a_session_cut_short_below_the_indexed_offset_is_indexed_again_without_stale_entries(tmp_path, store):
    session = _session_file(tmp_path)
    kept = session.read_bytes()
    append_pi_entry(
        session, "message", {"message": {"role": "user", "content": "vanishing words", "timestamp": 2}}
    )
    assert store.index_file(session).entries_indexed == 2
    assert store.search("work", "vanishing")
    session.write_bytes(kept)  # the same session, cut back to its first entry
    report = store.index_file(session)
    assert (report.mode, report.entries_indexed) == ("full", 1)
    assert store.search("work", "vanishing") == ()
    assert store.search("work", "index")
    assert store.storage().entries == 1


def test_a_session_path_with_nul_is_a_coded_error_everywhere(tmp_path):
    path = f"{tmp_path}/session\u0000.jsonl"
    with pytest.raises(PiSessionError) as caught:
        read_pi_session(path)
    assert caught.value.code == "pi-session-unreadable"
    adapter = PiSessionAdapter(path, trusted_roots=[tmp_path], transport=_transport)
    with pytest.raises(PiSessionError) as caught:
        adapter.snapshot_history()
    assert caught.value.code == "pi-session-unreadable"
    store = open_derived_store(None)
    with pytest.raises(DerivedStoreError) as caught:
        store.index_file(path)
    assert caught.value.code == "derived-store-source-unreadable"
    with pytest.raises(PiSessionError) as caught:
        store.rebuild_session(path)
    assert caught.value.code == "pi-session-unreadable"


_appended_lines = st.lists(
    st.one_of(
        st.builds(
            lambda text: {"type": "message", "message": {"role": "user", "content": text, "timestamp": 1}},
            st.text(alphabet="abc xyz", min_size=1, max_size=12),
        ),
        st.builds(
            lambda target, label: {
                "type": "custom",
                "customType": PIN_CUSTOM_TYPE,
                "data": {"entryId": target, "label": label},
            },
            _entry_ids,
            st.text(max_size=3),
        ),
        st.builds(
            lambda item, text: {
                "type": "custom",
                "customType": MEMORY_CUSTOM_TYPE,
                "data": {"op": "add", "itemId": item, "text": text},
            },
            _entry_ids,
            st.text(max_size=5),
        ),
        st.just({"type": "custom", "customType": UNPIN_CUSTOM_TYPE, "data": {"entryId": "a"}}),
        st.just("garbage"),
    ),
    max_size=12,
)


def _store_state(store, session_id: str) -> tuple[object, ...]:
    rows = store._connection.execute(
        "SELECT entry_id, parent_id, type, role, line, byte_offset, chars FROM entries "
        "WHERE session_id = ? ORDER BY line",
        (session_id,),
    ).fetchall()
    texts = store._connection.execute(
        "SELECT entry_key, body FROM entries_fts WHERE session_id = ? ORDER BY entry_key", (session_id,)
    ).fetchall()
    return rows, texts, store.pins(session_id), store.memory_items(session_id)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=_appended_lines, cuts=st.lists(st.integers(min_value=0, max_value=2_000), max_size=5))
def test_indexing_appends_piece_by_piece_equals_indexing_the_whole_file_once(tmp_path_factory, lines, cuts):
    directory = tmp_path_factory.mktemp("pieces")
    body = b""
    for number, line in enumerate(lines):
        if line == "garbage":
            body += b"{not json\n"
            continue
        entry = {
            "id": f"e{number}",
            "parentId": f"e{number - 1}" if number else None,
            "timestamp": "t",
            **line,
        }
        body += json.dumps(entry).encode() + b"\n"
    whole = _header(str(directory), "pieces") + body
    path = directory / "session.jsonl"
    store = open_derived_store(None)
    written = len(_header(str(directory), "pieces"))
    path.write_bytes(whole[:written])
    store.index_file(path)
    for cut in sorted({min(written + cut, len(whole)) for cut in cuts}):  # torn lines included
        path.write_bytes(whole[:cut])
        store.index_file(path)
    path.write_bytes(whole)
    assert store.index_file(path).indexed_offset == len(whole)
    fresh = open_derived_store(None)
    assert fresh.index_file(path).mode == "full"
    assert _store_state(store, "pieces") == _store_state(fresh, "pieces")
    store.close()
    fresh.close()
