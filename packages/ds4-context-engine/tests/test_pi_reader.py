"""Reading real Pi-format session files: versions, tree, issues. The files are never written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ds4_context_engine._exceptions import PiSessionError
from ds4_context_engine.pi import PI_ISSUE_CODES, read_pi_session, read_pi_session_bytes

FIXTURES = Path(__file__).parent / "fixtures" / "pi"
HEADER = b'{"type":"session","version":3,"id":"s-1","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/p"}\n'


def _codes(session):
    return [issue.code for issue in session.issues]


def test_v3_file_reads_every_entry_in_file_order_without_issues():
    session = read_pi_session(FIXTURES / "v3-coding.jsonl")
    assert session.header.version == 3
    assert session.session_id == "4f1c2a7e-0b5d-4a8e-9c1f-2d3e4f5a6b7c"
    assert session.header.cwd == "/home/dev/projects/widget"
    assert [entry.id for entry in session.entries][:3] == ["a0000001", "a0000002", "a0000003"]
    assert len(session.entries) == 16
    assert session.leaf_id == "a0000010"
    assert session.issues == ()
    assert session.labels() == {"a0000007": "failing test output"}


def test_v1_header_extra_fields_are_kept_and_entries_get_stable_ids():
    before = (FIXTURES / "v1-legacy.jsonl").read_bytes()
    first = read_pi_session(FIXTURES / "v1-legacy.jsonl")
    second = read_pi_session(FIXTURES / "v1-legacy.jsonl")
    assert first.header.version == 1
    assert first.header.extra["provider"] == "openai"
    assert first.header.extra["modelId"] == "gpt-4.1"
    assert first.header.extra["thinkingLevel"] == "off"
    assert first.header.parent_session == first.header.extra["branchedFrom"]
    assert first.header.parent_session.endswith("_aaaa.jsonl")
    ids = [entry.id for entry in first.entries]
    assert ids == [entry.id for entry in second.entries]
    assert all(len(entry_id) == 8 and int(entry_id, 16) >= 0 for entry_id in ids)
    assert len(set(ids)) == 7
    assert [entry.parent_id for entry in first.entries] == [None, *ids[:-1]]
    compaction = first.entries[4]
    assert compaction.type == "compaction"
    assert compaction.data["firstKeptEntryId"] == ids[3]
    assert (FIXTURES / "v1-legacy.jsonl").read_bytes() == before


def test_v2_hook_message_role_is_renamed_to_custom_in_memory_only():
    path = FIXTURES / "v2-branches.jsonl"
    before = path.read_bytes()
    session = read_pi_session(path)
    assert session.entry("b0000006").data["message"]["role"] == "custom"
    assert b'"role":"hookMessage"' in path.read_bytes()
    assert path.read_bytes() == before


def test_branches_and_leaves_follow_parent_ids():
    session = read_pi_session(FIXTURES / "v2-branches.jsonl")
    assert session.leaves() == ("b0000004", "b0000008")
    path, issues = session.branch()
    assert [entry.id for entry in path] == ["b0000001", "b0000005", "b0000006", "b0000007", "b0000008"]
    assert issues == ()
    old_path, _ = session.branch("b0000004")
    assert [entry.id for entry in old_path] == ["b0000001", "b0000002", "b0000003", "b0000004"]
    assert session.children()["b0000001"] == ["b0000002", "b0000005"]


def test_unknown_leaf_id_is_an_error_with_a_code():
    session = read_pi_session(FIXTURES / "v2-branches.jsonl")
    with pytest.raises(PiSessionError) as caught:
        session.branch("deadbeef")
    assert caught.value.code == "pi-leaf-unknown"


def test_unknown_entry_types_are_kept_and_reported():
    session = read_pi_session(FIXTURES / "v3-compacted.jsonl")
    marker = session.entry("c0000007")
    assert marker is not None
    assert marker.type == "workflow_marker"
    assert marker.data["step"] == 3
    assert [(issue.code, issue.entry_id, issue.line) for issue in session.issues] == [
        ("pi-entry-type-unknown", "c0000007", 8)
    ]


def test_corrupt_partial_duplicate_and_invalid_lines_are_reported_with_codes():
    path = FIXTURES / "corrupt.jsonl"
    before = path.read_bytes()
    session = read_pi_session(path)
    assert [(issue.code, issue.line) for issue in session.issues] == [
        ("pi-line-corrupt", 3),
        ("pi-line-corrupt", 4),
        ("pi-entry-invalid", 5),
        ("pi-entry-id-duplicate", 6),
        ("pi-line-partial", 9),
    ]
    assert [entry.id for entry in session.entries] == ["d0000001", "d0000003", "d0000004"]
    # the first d0000001 wins; the duplicate never replaces it
    assert session.entry("d0000001").data["message"]["content"] == "hello"
    assert session.end_offset == before.rfind(b"\n") + 1
    assert path.read_bytes() == before
    assert {issue.code for issue in session.issues} <= set(PI_ISSUE_CODES)


def test_dangling_parent_ends_the_branch_and_is_reported():
    session = read_pi_session(FIXTURES / "corrupt.jsonl")
    path, issues = session.branch()
    assert [entry.id for entry in path] == ["d0000003", "d0000004"]
    assert [(issue.code, issue.entry_id) for issue in issues] == [("pi-parent-dangling", "d0000003")]


def test_parent_cycle_is_cut_and_reported():
    session = read_pi_session(FIXTURES / "cycle.jsonl")
    path, issues = session.branch()
    assert [entry.id for entry in path] == ["e0000001", "e0000002", "e0000003"]
    assert [(issue.code, issue.entry_id) for issue in issues] == [("pi-parent-cycle", "e0000003")]


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"", "pi-session-header-missing"),
        (b'{"type":"session","version":3,"id":"x","cwd":"/p"}', "pi-session-header-missing"),
        (b'{"type":"message"}\n', "pi-session-header-missing"),
        (b"not json\n", "pi-session-header-invalid"),
        (b'{"type":"session","version":4,"id":"x","cwd":"/p"}\n', "pi-session-version-unsupported"),
        (b'{"type":"session","version":"3","id":"x","cwd":"/p"}\n', "pi-session-header-invalid"),
        (b'{"type":"session","version":3,"cwd":"/p"}\n', "pi-session-header-invalid"),
    ],
)
def test_unusable_headers_raise_with_codes_and_leave_the_file_alone(tmp_path, data, code):
    path = tmp_path / "s.jsonl"
    path.write_bytes(data)
    with pytest.raises(PiSessionError) as caught:
        read_pi_session(path)
    assert caught.value.code == code
    assert path.read_bytes() == data


def test_missing_oversized_and_symlinked_files_are_refused(tmp_path):
    with pytest.raises(PiSessionError) as missing:
        read_pi_session(tmp_path / "nope.jsonl")
    assert missing.value.code == "pi-session-not-found"
    big = tmp_path / "big.jsonl"
    big.write_bytes(HEADER + b"\n" * 200)
    with pytest.raises(PiSessionError) as too_large:
        read_pi_session(big, max_bytes=100)
    assert too_large.value.code == "pi-session-too-large"
    link = tmp_path / "link.jsonl"
    os.symlink(FIXTURES / "v3-coding.jsonl", link)
    with pytest.raises(PiSessionError) as linked:
        read_pi_session(link)
    assert linked.value.code == "pi-session-unreadable"


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(st.binary(max_size=40), st.sampled_from([b"{}", b"[]", b"null", b'{"type":1}'])), max_size=8
    )
)
def test_arbitrary_lines_after_a_header_never_raise_and_are_accounted_for(lines):
    data = HEADER + b"\n".join(line.replace(b"\n", b" ") for line in lines) + (b"\n" if lines else b"")
    session = read_pi_session_bytes(data)
    non_blank = sum(1 for line in lines if line.replace(b"\n", b" ").strip())
    assert len(session.entries) + len(session.issues) == non_blank
