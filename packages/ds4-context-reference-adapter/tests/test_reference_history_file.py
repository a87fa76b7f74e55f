"""The ds4-runtime-session-v1 file: create, append, read, and every rejection leaving the bytes alone."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from reference_helpers import RUNTIME, SESSION, make_message

from ds4_context_core import Provenance, TextBlock, ToolCallBlock, ToolResultBlock
from ds4_context_reference_adapter import (
    ReferenceConfigError,
    ReferenceHistoryError,
    ReferenceHistoryLimits,
    append_reference_history_message,
    create_reference_history,
    read_reference_history,
    read_reference_history_header,
)


def _call(entry: str, call_id: str):
    return make_message(
        entry, ToolCallBlock(id=call_id, name="read", arguments={"path": "a.py"}), role="assistant"
    )


def _result(entry: str, call_id: str):
    return make_message(
        entry, ToolResultBlock(tool_call_id=call_id, tool_name="read", content="x"), role="tool"
    )


def test_every_directory_level_created_for_a_history_is_private(tmp_path, project):
    old_umask = os.umask(0o022)
    try:
        create_reference_history(tmp_path / "a" / "b" / "h.jsonl", session_id="s1", project_root=project)
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "a" / "b").stat().st_mode) == 0o700


def test_create_writes_only_the_header_with_private_modes(tmp_path, project):
    path = tmp_path / "new-dir" / "session.jsonl"
    header = create_reference_history(path, session_id="s1", project_root=project)
    expected = (
        '{"type":"ds4-runtime-session-v1","runtimeId":"jsonl-reference","sessionId":"s1",'
        f'"projectRoot":{json.dumps(str(project.resolve()))}}}\n'
    )
    assert path.read_text("utf-8") == expected
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert header.session_id == "s1"
    assert header.runtime_id == "jsonl-reference"


def test_create_stores_the_realpath_of_a_symlinked_root(tmp_path, project):
    link = tmp_path / "link-to-project"
    link.symlink_to(project, target_is_directory=True)
    header = create_reference_history(tmp_path / "h.jsonl", session_id="s", project_root=link)
    assert header.project_root == str(project.resolve())
    assert read_reference_history(tmp_path / "h.jsonl").header.project_root == str(project.resolve())


def test_create_refuses_to_overwrite_anything(history, project, tmp_path):
    before = history.read_bytes()
    with pytest.raises(ReferenceHistoryError) as caught:
        create_reference_history(history, session_id="other", project_root=project)
    assert caught.value.code == "reference-history-exists"
    assert history.read_bytes() == before
    dangling = tmp_path / "dangling.jsonl"
    dangling.symlink_to(tmp_path / "nowhere.jsonl")
    with pytest.raises(ReferenceHistoryError) as caught:
        create_reference_history(dangling, session_id="s", project_root=project)
    assert caught.value.code == "reference-history-exists"
    assert not (tmp_path / "nowhere.jsonl").exists()


@pytest.mark.parametrize(
    ("session_id", "runtime_id"), [("", "r"), ("s\n", "r"), ("s", "r\x00"), ("s", "x" * 600)]
)
def test_create_rejects_bad_identifiers_and_creates_nothing(tmp_path, project, session_id, runtime_id):
    path = tmp_path / "h.jsonl"
    with pytest.raises(ReferenceHistoryError) as caught:
        create_reference_history(path, session_id=session_id, project_root=project, runtime_id=runtime_id)
    assert caught.value.code == "reference-history-message-rejected"
    assert caught.value.reason == "identifier-invalid"
    assert not path.exists()


def test_create_rejects_a_missing_project_root(tmp_path):
    with pytest.raises(ReferenceHistoryError) as caught:
        create_reference_history(tmp_path / "h.jsonl", session_id="s", project_root=tmp_path / "absent")
    assert caught.value.code == "canonical-history-identity-mismatch"
    assert not (tmp_path / "h.jsonl").exists()


def test_appended_messages_read_back_with_revision_and_complete_groups(history, project):
    messages = [
        make_message("u1"),
        make_message("a1", ToolCallBlock(id="c1", name="read", arguments={"path": "a.py"}), role="assistant"),
        _result("t1", "c1"),
        make_message("a2", TextBlock(text="done"), role="assistant"),
    ]
    receipts = [append_reference_history_message(history, message) for message in messages]
    assert [receipt.line for receipt in receipts] == [2, 3, 4, 5]
    raw = history.read_bytes()
    assert receipts[-1].offset + receipts[-1].length == len(raw)
    lines = raw.decode("utf-8").splitlines()
    assert json.loads(lines[1]) == {
        "type": "message",
        "message": {
            "id": "session-1:u1",
            "sourceEntryId": "u1",
            "role": "user",
            "blocks": [{"type": "text", "text": "text of u1"}],
            "provenance": {
                "source": "runtime-session",
                "sessionId": "session-1",
                "entryId": "u1",
                "runtimeId": "jsonl-reference",
            },
            "flags": {},
        },
    }
    loaded = read_reference_history(
        history, runtime_id=RUNTIME, session_id=SESSION, trusted_project_root=project
    )
    assert loaded.messages == tuple(messages)
    assert loaded.revision == hashlib.sha256(raw).hexdigest()
    assert loaded.size_bytes == len(raw)
    snapshot = loaded.snapshot
    assert snapshot.project_root == str(project.resolve())
    (group,) = snapshot.tool_atomic_groups
    assert group.message_ids == ("session-1:a1", "session-1:t1")
    assert group.complete is True


def test_reading_twice_gives_the_same_revision_and_never_touches_the_file(history):
    append_reference_history_message(history, make_message("u1"))
    before = history.stat()
    first = read_reference_history(history)
    second = read_reference_history(history)
    after = history.stat()
    assert first == second
    assert (before.st_mtime_ns, before.st_size) == (after.st_mtime_ns, after.st_size)


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (make_message("x", session="other-session"), "provenance-mismatch"),
        (make_message("x", runtime="other-runtime"), "provenance-mismatch"),
        (make_message("x", runtime=None), "provenance-mismatch"),
        (
            msgspec.structs.replace(
                make_message("x"),
                provenance=Provenance(
                    source="pi-session", session_id=SESSION, entry_id="x", runtime_id=RUNTIME
                ),
            ),
            "provenance-mismatch",
        ),
        (msgspec.structs.replace(make_message("x"), source_entry_id="y"), "provenance-mismatch"),
        (make_message("u1"), "message-id-duplicate"),
        (_result("t9", "never-called"), "tool-result-orphaned"),
        (_call("a9", "c1"), "tool-call-duplicate"),
        (make_message("bad\u0085entry"), "identifier-invalid"),
    ],
)
def test_append_rejects_messages_that_do_not_belong_and_writes_nothing(history, message, reason):
    append_reference_history_message(history, make_message("u1"))
    append_reference_history_message(history, _call("a1", "c1"))
    before = history.read_bytes()
    with pytest.raises(ReferenceHistoryError) as caught:
        append_reference_history_message(history, message)
    assert caught.value.code == "reference-history-message-rejected"
    assert caught.value.reason == reason
    assert history.read_bytes() == before


def test_a_message_appended_by_another_process_is_seen_as_a_duplicate(history):
    append_reference_history_message(history, make_message("u1"))  # this process now has an index
    script = (
        "import sys; sys.path.insert(0, sys.argv[2]);"
        "from reference_helpers import make_message;"
        "from ds4_context_reference_adapter import append_reference_history_message as a;"
        "a(sys.argv[1], make_message('u2'))"
    )
    subprocess.run([sys.executable, "-c", script, str(history), str(Path(__file__).parent)], check=True)
    before = history.read_bytes()
    with pytest.raises(ReferenceHistoryError) as caught:
        append_reference_history_message(history, make_message("u2"))
    assert caught.value.reason == "message-id-duplicate"
    assert history.read_bytes() == before
    assert append_reference_history_message(history, make_message("u3")).line == 4


def test_append_refuses_to_go_over_the_limits(history):
    limits = ReferenceHistoryLimits(max_messages=2)
    append_reference_history_message(history, make_message("u1"), limits=limits)
    append_reference_history_message(history, make_message("u2"), limits=limits)
    before = history.read_bytes()
    with pytest.raises(ReferenceHistoryError) as caught:
        append_reference_history_message(history, make_message("u3"), limits=limits)
    assert (caught.value.code, caught.value.reason) == (
        "reference-history-limit-exceeded",
        "too-many-messages",
    )
    tight = ReferenceHistoryLimits(max_file_bytes=len(before) + 10)
    with pytest.raises(ReferenceHistoryError) as caught:
        append_reference_history_message(history, make_message("u3"), limits=tight)
    assert (caught.value.code, caught.value.reason) == ("reference-history-limit-exceeded", "file-too-large")
    assert history.read_bytes() == before


def test_reads_enforce_configurable_limits(history):
    for entry in ("u1", "u2", "u3"):
        append_reference_history_message(history, make_message(entry))
    size = history.stat().st_size
    assert len(read_reference_history(history, limits=ReferenceHistoryLimits(max_messages=3)).messages) == 3
    with pytest.raises(ReferenceHistoryError) as caught:
        read_reference_history(history, limits=ReferenceHistoryLimits(max_messages=2))
    assert (caught.value.code, caught.value.reason) == ("canonical-history-read-failed", "too-many-messages")
    with pytest.raises(ReferenceHistoryError) as caught:
        read_reference_history(history, limits=ReferenceHistoryLimits(max_file_bytes=size - 1))
    assert (caught.value.code, caught.value.reason) == ("canonical-history-read-failed", "file-too-large")


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_limits_must_be_positive_integers(bad):
    with pytest.raises(ReferenceConfigError) as caught:
        ReferenceHistoryLimits(max_messages=bad)
    assert caught.value.code == "reference-adapter-config-invalid"


@pytest.mark.parametrize(
    ("expectation", "reason"),
    [
        ({"runtime_id": "another-runtime"}, "runtime-id-mismatch"),
        ({"session_id": "another-session"}, "session-id-mismatch"),
    ],
)
def test_read_rejects_another_identity(history, expectation, reason):
    with pytest.raises(ReferenceHistoryError) as caught:
        read_reference_history(history, **expectation)
    assert (caught.value.code, caught.value.reason) == ("canonical-history-identity-mismatch", reason)


def test_read_rejects_an_untrusted_project_root_with_symlinks_resolved(history, project, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with pytest.raises(ReferenceHistoryError) as caught:
        read_reference_history(history, trusted_project_root=elsewhere)
    assert (caught.value.code, caught.value.reason) == (
        "canonical-history-identity-mismatch",
        "project-root-untrusted",
    )
    link = tmp_path / "alias"
    link.symlink_to(project, target_is_directory=True)
    assert read_reference_history(history, trusted_project_root=link).header.project_root == str(
        project.resolve()
    )


def _write_header(path: Path, root: str) -> None:
    header = {
        "type": "ds4-runtime-session-v1",
        "runtimeId": RUNTIME,
        "sessionId": SESSION,
        "projectRoot": root,
    }
    path.write_text(json.dumps(header) + "\n", "utf-8")


def test_read_rejects_a_header_root_that_is_a_symlink_or_missing(tmp_path, project):
    link = tmp_path / "alias"
    link.symlink_to(project, target_is_directory=True)
    path = tmp_path / "h.jsonl"
    _write_header(path, str(link))
    before = path.read_bytes()
    with pytest.raises(ReferenceHistoryError) as caught:
        read_reference_history(path)
    assert (caught.value.code, caught.value.reason) == (
        "canonical-history-identity-mismatch",
        "project-root-not-canonical",
    )
    _write_header(path, str(tmp_path / "gone"))
    with pytest.raises(ReferenceHistoryError) as caught:
        read_reference_history(path)
    assert (caught.value.code, caught.value.reason) == (
        "canonical-history-identity-mismatch",
        "project-root-untrusted",
    )
    assert path.read_bytes() != before  # sanity: the second case really used another header


@pytest.mark.parametrize(
    ("content", "reason", "line"),
    [
        (b"", "empty-file", 1),
        (b"not json\n", "header-invalid", 1),
        (b'{"type":"message"}\n', "header-invalid", 1),
        (b"HEADER\n{broken\n", "record-invalid", 2),
        (b"HEADER\n\n", "record-invalid", 2),
        (b'HEADER\n{"type":"message","message":{"id":"x"}}\n', "record-invalid", 2),
        (b'HEADER\n{"type":"other","message":{}}\n', "record-invalid", 2),
        (b"HEADER\nRECORD", "unterminated-record", 2),
    ],
)
def test_read_rejects_damaged_files_and_leaves_them_alone(tmp_path, project, content, reason, line):
    header = json.dumps(
        {
            "type": "ds4-runtime-session-v1",
            "runtimeId": RUNTIME,
            "sessionId": SESSION,
            "projectRoot": str(project),
        }
    ).encode()
    record = json.dumps({"type": "message", "message": msgspec.to_builtins(make_message("u1"))}).encode()
    path = tmp_path / "h.jsonl"
    path.write_bytes(content.replace(b"HEADER", header).replace(b"RECORD", record))
    before = path.read_bytes()
    with pytest.raises(ReferenceHistoryError) as caught:
        read_reference_history(path)
    assert caught.value.code == "canonical-history-read-failed"
    assert (caught.value.reason, caught.value.line) == (reason, line)
    assert path.read_bytes() == before
    if content:
        with pytest.raises(ReferenceHistoryError) as caught:
            append_reference_history_message(path, make_message("u9"))
        assert caught.value.code == "canonical-history-read-failed"
        assert path.read_bytes() == before


def test_a_record_of_another_session_is_invalid_history(tmp_path, project):
    path = tmp_path / "h.jsonl"
    _write_header(path, str(project))
    foreign = make_message("u1", session="someone-else")
    with path.open("ab") as handle:
        handle.write(msgspec.json.encode({"type": "message", "message": foreign}) + b"\n")
    with pytest.raises(ReferenceHistoryError) as caught:
        read_reference_history(path)
    assert (caught.value.code, caught.value.reason, caught.value.line) == (
        "canonical-history-invalid",
        "provenance-mismatch",
        2,
    )


def test_an_orphaned_tool_result_written_by_another_tool_is_invalid_history(tmp_path, project):
    path = tmp_path / "h.jsonl"
    _write_header(path, str(project))
    with path.open("ab") as handle:
        handle.write(msgspec.json.encode({"type": "message", "message": _result("t1", "nobody")}) + b"\n")
    before = path.read_bytes()
    with pytest.raises(ReferenceHistoryError) as caught:
        read_reference_history(path)
    assert (caught.value.code, caught.value.reason) == ("canonical-history-invalid", "snapshot-invalid")
    assert "tool-result-orphaned" in {issue.code for issue in caught.value.issues}
    assert path.read_bytes() == before


def test_paths_that_are_not_regular_files_are_refused(tmp_path, history):
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    for target in (fifo, tmp_path):
        with pytest.raises(ReferenceHistoryError) as caught:
            read_reference_history(target)
        assert (caught.value.code, caught.value.reason) == (
            "canonical-history-read-failed",
            "not-a-regular-file",
        )
    with pytest.raises(ReferenceHistoryError) as caught:
        read_reference_history(tmp_path / "missing.jsonl")
    assert (caught.value.code, caught.value.reason) == ("canonical-history-read-failed", "file-missing")
    link = tmp_path / "link.jsonl"
    link.symlink_to(history)
    before = history.read_bytes()
    with pytest.raises(ReferenceHistoryError) as caught:
        append_reference_history_message(link, make_message("u1"))
    assert caught.value.reason == "not-a-regular-file"
    assert history.read_bytes() == before


def test_an_index_is_not_trusted_once_the_bytes_under_it_changed(history):
    append_reference_history_message(history, make_message("u1"))  # this process indexes u1
    header = history.read_bytes().splitlines(keepends=True)[0]
    other = msgspec.json.encode({"type": "message", "message": make_message("u2")}) + b"\n"
    # Same inode, same length, other content: what a recreated file reusing the inode number looks like.
    with history.open("r+b") as handle:
        handle.truncate(0)
        handle.write(header + other)
    assert append_reference_history_message(history, make_message("u1")).line == 3
    with pytest.raises(ReferenceHistoryError) as caught:
        append_reference_history_message(history, make_message("u2"))
    assert caught.value.reason == "message-id-duplicate"


def test_the_header_alone_can_be_read_with_a_small_bound(history, tmp_path, project):
    assert read_reference_history_header(history).project_root == str(project.resolve())
    endless = tmp_path / "endless.jsonl"
    endless.write_bytes(b'{"type":"ds4-runtime-session-v1","runtimeId":"' + b"r" * 100_000)
    with pytest.raises(ReferenceHistoryError) as caught:
        read_reference_history_header(endless)
    assert (caught.value.code, caught.value.reason) == ("canonical-history-read-failed", "header-invalid")
    short = tmp_path / "short.jsonl"
    short.write_bytes(b'{"type":"ds4-runtime-session-v1"')
    with pytest.raises(ReferenceHistoryError) as caught:
        read_reference_history_header(short)
    assert caught.value.reason == "unterminated-record"
    with pytest.raises(ReferenceHistoryError) as caught:
        read_reference_history_header(tmp_path / "missing.jsonl")
    assert caught.value.reason == "file-missing"
