"""Creating and appending to Pi session files: whole lines, fresh ids, existing bytes untouched."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ds4_context_engine._exceptions import PiSessionWriteError
from ds4_context_engine.pi import (
    _writer,
    append_pi_entries,
    append_pi_entry,
    build_pi_context,
    create_pi_session,
    extend_pi_session,
    read_pi_session,
)
from ds4_context_engine.store import open_derived_store

FIXTURES = Path(__file__).parent / "fixtures" / "pi"
USER = {"message": {"role": "user", "content": "hello", "timestamp": 1}}


def test_every_directory_level_created_for_a_session_or_a_store_is_private(tmp_path):
    old_umask = os.umask(0o022)
    try:
        create_pi_session(tmp_path / "a" / "b" / "c" / "s.jsonl", cwd="/work/project")
        open_derived_store(tmp_path / "x" / "y" / "derived.sqlite3").close()
    finally:
        os.umask(old_umask)
    for level in ("a", "a/b", "a/b/c", "x", "x/y"):
        assert stat.S_IMODE((tmp_path / level).stat().st_mode) == 0o700, level


@pytest.mark.parametrize("failure", ["short", "disk-full"])
def test_a_header_not_written_whole_leaves_no_session_file(tmp_path, monkeypatch, failure):
    real_write = os.write

    def failing_write(descriptor, data):
        if failure == "short":
            return real_write(descriptor, data[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", failing_write)
    path = tmp_path / "s.jsonl"
    with pytest.raises(PiSessionWriteError) as caught:
        create_pi_session(path, cwd="/work/project")
    monkeypatch.undo()
    assert caught.value.code == "pi-session-create-failed"
    assert not path.exists()
    create_pi_session(path, cwd="/work/project")  # the path is free for a retry
    assert read_pi_session(path).header.cwd == "/work/project"


def test_create_writes_a_private_v3_header_and_refuses_to_overwrite(tmp_path):
    path = tmp_path / "sessions" / "s.jsonl"
    header = create_pi_session(path, cwd="/work/project", session_id="sess-1")
    assert header.version == 3
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    session = read_pi_session(path)
    assert (session.session_id, session.header.cwd, session.entries) == ("sess-1", "/work/project", ())
    before = path.read_bytes()
    with pytest.raises(PiSessionWriteError) as caught:
        create_pi_session(path, cwd="/elsewhere")
    assert caught.value.code == "pi-session-exists"
    assert path.read_bytes() == before


def test_appends_chain_to_the_leaf_with_fresh_8_hex_ids_and_keep_earlier_bytes(tmp_path):
    path = tmp_path / "s.jsonl"
    create_pi_session(path, cwd="/p", session_id="s")
    first = append_pi_entry(path, "message", USER)
    before = path.read_bytes()
    second = append_pi_entry(path, "custom", {"customType": "ds4-context.pin", "data": {"entryId": first.id}})
    after = path.read_bytes()
    assert after.startswith(before)
    assert after.endswith(b"\n")
    assert after.count(b"\n") == before.count(b"\n") + 1
    assert re.fullmatch(r"[0-9a-f]{8}", first.id)
    assert re.fullmatch(r"[0-9a-f]{8}", second.id)
    assert first.parent_id is None
    assert second.parent_id == first.id
    session = read_pi_session(path)
    assert [entry.id for entry in session.entries] == [first.id, second.id]
    assert session.entry(second.id).data["data"] == {"entryId": first.id}
    assert second.offset == len(before)
    assert second.line == 3


def test_branching_from_an_earlier_entry(tmp_path):
    path = tmp_path / "s.jsonl"
    create_pi_session(path, cwd="/p")
    root = append_pi_entry(path, "message", USER)
    append_pi_entry(path, "message", {"message": {"role": "user", "content": "first try", "timestamp": 2}})
    branch = append_pi_entry(
        path, "branch_summary", {"fromId": root.id, "summary": "tried something"}, parent_id=root.id
    )
    context = build_pi_context(read_pi_session(path))
    assert [message.source_entry_id for message in context.messages] == [root.id, branch.id]


@pytest.mark.parametrize(
    ("entry_type", "fields", "parent", "code"),
    [
        ("message", {"id": "00000000", **USER}, None, "pi-entry-fields-invalid"),
        ("message", {"parentId": None, **USER}, None, "pi-entry-fields-invalid"),
        ("", USER, None, "pi-entry-fields-invalid"),
        ("message", {"message": object()}, None, "pi-entry-fields-invalid"),
        ("message", USER, "ffffffff", "pi-parent-unknown"),
    ],
)
def test_bad_appends_are_refused_and_leave_the_file_unchanged(tmp_path, entry_type, fields, parent, code):
    path = tmp_path / "s.jsonl"
    create_pi_session(path, cwd="/p")
    append_pi_entry(path, "message", USER)
    before = path.read_bytes()
    kwargs = {} if parent is None else {"parent_id": parent}
    with pytest.raises(PiSessionWriteError) as caught:
        append_pi_entry(path, entry_type, fields, **kwargs)
    assert caught.value.code == code
    assert path.read_bytes() == before


def test_append_after_a_torn_line_is_refused(tmp_path):
    path = tmp_path / "s.jsonl"
    shutil.copy(FIXTURES / "corrupt.jsonl", path)
    before = path.read_bytes()
    with pytest.raises(PiSessionWriteError) as caught:
        append_pi_entry(path, "message", USER)
    assert caught.value.code == "pi-session-torn-tail"
    assert path.read_bytes() == before


def test_append_to_missing_or_symlinked_file_is_refused(tmp_path):
    with pytest.raises(PiSessionWriteError) as missing:
        append_pi_entry(tmp_path / "none.jsonl", "message", USER)
    assert missing.value.code == "pi-session-not-found"
    target = tmp_path / "real.jsonl"
    create_pi_session(target, cwd="/p")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    before = target.read_bytes()
    with pytest.raises(PiSessionWriteError) as linked:
        append_pi_entry(link, "message", USER)
    assert linked.value.code == "pi-session-unwritable"
    assert target.read_bytes() == before


def test_append_to_a_v1_file_keeps_its_migrated_ids(tmp_path):
    path = tmp_path / "legacy.jsonl"
    shutil.copy(FIXTURES / "v1-legacy.jsonl", path)
    before_session = read_pi_session(path)
    entry = append_pi_entry(path, "message", USER)
    after = read_pi_session(path)
    assert [e.id for e in after.entries] == [*(e.id for e in before_session.entries), entry.id]
    assert after.entry(entry.id).parent_id == before_session.leaf_id
    assert build_pi_context(after).messages[-1].source_entry_id == entry.id


def test_concurrent_appenders_never_interleave_or_reuse_ids(tmp_path):
    path = tmp_path / "s.jsonl"
    create_pi_session(path, cwd="/p")
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            for _ in range(10):
                append_pi_entry(path, "message", USER)
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    session = read_pi_session(path)
    assert session.issues == ()
    assert len({entry.id for entry in session.entries}) == 40
    # every entry hangs off the one before it: one linear branch, no lost leaf update
    path_entries, issues = session.branch()
    assert len(path_entries) == 40
    assert issues == ()


def test_extend_reads_only_the_appended_tail_and_matches_a_full_read(tmp_path):
    path = tmp_path / "s.jsonl"
    shutil.copy(FIXTURES / "v3-coding.jsonl", path)
    session = read_pi_session(path)
    append_pi_entry(path, "message", USER)
    with path.open("rb") as handle:
        handle.seek(session.end_offset)
        tail = handle.read()
    extended = extend_pi_session(session, tail)
    fresh = read_pi_session(path)
    assert [(e.id, e.line, e.offset) for e in extended.entries] == [
        (e.id, e.line, e.offset) for e in fresh.entries
    ]
    assert extended.end_offset == fresh.end_offset == path.stat().st_size
    assert extend_pi_session(fresh, b"") is fresh


def test_batch_append_chains_entries_in_one_write_or_writes_nothing(tmp_path):
    path = tmp_path / "s.jsonl"
    create_pi_session(path, cwd="/p")
    root = append_pi_entry(path, "message", USER)
    written = append_pi_entries(path, [("message", USER), ("label", {"targetId": root.id, "label": "start"})])
    assert [entry.parent_id for entry in written] == [root.id, written[0].id]
    session = read_pi_session(path)
    assert [entry.id for entry in session.entries] == [root.id, written[0].id, written[1].id]
    assert session.labels() == {root.id: "start"}
    before = path.read_bytes()
    with pytest.raises(PiSessionWriteError) as caught:
        append_pi_entries(path, [("message", USER), ("message", {"id": "x", **USER})])
    assert caught.value.code == "pi-entry-fields-invalid"
    assert path.read_bytes() == before


def _count_full_reads(monkeypatch):
    reads = []
    real = _writer.read_pi_session_bytes

    def counting(data, **kwargs):
        reads.append(len(data))
        return real(data, **kwargs)

    monkeypatch.setattr(_writer, "read_pi_session_bytes", counting)
    return reads


def test_appends_to_a_file_only_this_process_wrote_do_not_read_it_again(tmp_path, monkeypatch):
    path = tmp_path / "s.jsonl"
    create_pi_session(path, cwd="/p")
    reads = _count_full_reads(monkeypatch)
    written = [append_pi_entry(path, "message", USER) for _ in range(50)]
    written += append_pi_entries(path, [("message", USER), ("message", USER)])
    # one read to learn the file, then none: a long turn's appends stay linear in what they add
    assert len(reads) == 1
    session = read_pi_session(path)
    assert [entry.id for entry in session.entries] == [entry.id for entry in written]
    assert [entry.line for entry in session.entries] == [entry.line for entry in written]
    assert [entry.offset for entry in session.entries] == [entry.offset for entry in written]
    assert len(session.branch()[0]) == len(written)


def test_an_append_by_another_process_is_seen_by_the_next_append(tmp_path, monkeypatch):
    path = tmp_path / "s.jsonl"
    create_pi_session(path, cwd="/p")
    mine = append_pi_entry(path, "message", USER)
    script = (
        "import sys; from ds4_context_engine.pi import append_pi_entry; "
        "print(append_pi_entry(sys.argv[1], 'message', "
        "{'message': {'role': 'user', 'content': 'other', 'timestamp': 2}}).id)"
    )
    other = subprocess.run(
        [sys.executable, "-c", script, str(path)], check=True, capture_output=True, text=True
    ).stdout.strip()
    reads = _count_full_reads(monkeypatch)
    next_entry = append_pi_entry(path, "message", USER)
    assert len(reads) == 1  # the file changed under us: read again
    assert next_entry.parent_id == other != mine.id
    session = read_pi_session(path)
    assert session.issues == ()
    assert [entry.id for entry in session.entries] == [mine.id, other, next_entry.id]


@pytest.mark.parametrize("how", ["replaced", "rewritten-in-place"])
def test_a_file_changed_behind_the_writer_is_read_again(tmp_path, monkeypatch, how):
    path = tmp_path / "s.jsonl"
    create_pi_session(path, cwd="/p")
    first = append_pi_entry(path, "message", USER)
    append_pi_entry(path, "message", USER)
    # another tool drops the last entry and writes a same-sized line: a different leaf, same length
    lines = path.read_bytes().splitlines(keepends=True)
    last = lines[-1]
    old_id = read_pi_session(path).leaf_id
    swapped = last.replace(old_id.encode(), b"f" * len(old_id))
    if how == "replaced":
        other = tmp_path / "other.jsonl"
        other.write_bytes(b"".join(lines[:-1]) + swapped)
        os.replace(other, path)
    else:
        with path.open("r+b") as handle:
            handle.seek(sum(map(len, lines[:-1])))
            handle.write(swapped)
    reads = _count_full_reads(monkeypatch)
    entry = append_pi_entry(path, "message", USER)
    assert len(reads) == 1
    assert entry.parent_id == "f" * len(old_id)
    session = read_pi_session(path)
    assert session.issues == ()
    assert session.entry(first.id) is not None
