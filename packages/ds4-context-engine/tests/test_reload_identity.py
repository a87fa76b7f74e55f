"""Re-reading a grown Pi session trusts the prefix read before only while the path names that same file.

A symlink swapped in after a snapshot is refused with the code a fresh open gives, and a replaced or
rewritten file is read whole and checked again, in the adapter and in the workspace alike. A plain append
still parses only the new bytes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ds4_context_engine._exceptions import PiSessionError, UntrustedPathError
from ds4_context_engine.commands import ContextWorkspace
from ds4_context_engine.pi import (
    PiSessionAdapter,
    append_pi_entry,
    create_pi_session,
    read_pi_session,
)
from ds4_context_engine.pi import _view as view_module

SESSION_ID = "11111111-1111-1111-1111-111111111111"
SECRET = "OTHER-PROJECT-SECRET"


async def _transport(request):
    raise AssertionError("no completion is sent in these tests")


def _message(text: str, timestamp: int = 1) -> dict[str, object]:
    return {"message": {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": timestamp}}


def _session(path: Path, cwd: Path, *texts: str, timestamp: str = "2026-01-01T00:00:00.000Z") -> list[str]:
    """A v3 session at ``path`` (written by the package's writer) and the ids of its messages."""
    create_pi_session(path, cwd=str(cwd), session_id=SESSION_ID, timestamp=timestamp)
    return [append_pi_entry(path, "message", _message(text, number)).id for number, text in enumerate(texts)]


@pytest.fixture
def projects(tmp_path):
    """Two project directories whose names have the same length, so their headers do too."""
    project, other = tmp_path / "proj", tmp_path / "othr"
    project.mkdir()
    other.mkdir()
    return project, other


def _swap_for_symlink(path: Path, target: Path) -> None:
    path.unlink()
    os.symlink(target, path)


def _other_project_session(path: Path, other: Path, prefix: bytes) -> None:
    """The same bytes as ``prefix`` (header included) plus a line from another project."""
    path.write_bytes(prefix)
    append_pi_entry(path, "message", _message(SECRET))


def _texts(snapshot) -> str:
    return repr([message.blocks for message in snapshot.messages])


def test_the_adapter_refuses_a_symlink_swapped_in_after_a_snapshot(projects):
    project, other = projects
    path = project / "session.jsonl"
    _session(path, project, "hello")
    adapter = PiSessionAdapter(path, trusted_roots=[project], transport=_transport)
    assert len(adapter.snapshot_history().messages) == 1
    elsewhere = other / "session.jsonl"
    _other_project_session(elsewhere, other, path.read_bytes())
    _swap_for_symlink(path, elsewhere)

    with pytest.raises(PiSessionError) as fresh:
        PiSessionAdapter(path, trusted_roots=[project], transport=_transport).snapshot_history()
    with pytest.raises(PiSessionError) as again:
        adapter.snapshot_history()
    assert again.value.code == fresh.value.code == "pi-session-unreadable"
    assert SECRET not in str(again.value)
    assert [d.code for d in adapter.diagnostics()] == ["canonical-history-read-failed"]
    with pytest.raises(PiSessionError):
        adapter.trusted_project_root()


def test_the_workspace_refuses_a_symlink_swapped_in_before_a_refresh(projects):
    project, other = projects
    path = project / "session.jsonl"
    ids = _session(path, project, "hello")
    workspace = ContextWorkspace.open(path, no_store=True)
    assert [entry.id for entry in workspace.session.entries] == ids
    elsewhere = other / "session.jsonl"
    _other_project_session(elsewhere, other, path.read_bytes())
    _swap_for_symlink(path, elsewhere)

    with pytest.raises(PiSessionError) as fresh:
        ContextWorkspace.open(path, no_store=True)
    with pytest.raises(PiSessionError) as again:
        workspace.refresh()
    assert again.value.code == fresh.value.code == "pi-session-unreadable"
    # the refused read changed nothing
    assert [entry.id for entry in workspace.session.entries] == ids
    assert SECRET not in repr([entry.data for entry in workspace.session.entries])


def test_a_file_rewritten_in_place_with_another_projects_header_is_read_whole_and_refused(projects):
    project, other = projects
    path = project / "session.jsonl"
    _session(path, project, "hello")
    adapter = PiSessionAdapter(path, trusted_roots=[project], transport=_transport)
    adapter.snapshot_history()
    inode = path.stat().st_ino
    # same inode, same session id, header and lines of the same lengths: only the cwd (and the ids) differ
    scratch = other / "scratch.jsonl"
    _session(scratch, other, "hullo", SECRET)
    path.write_bytes(scratch.read_bytes())
    assert path.stat().st_ino == inode

    with pytest.raises(UntrustedPathError) as fresh:
        PiSessionAdapter(path, trusted_roots=[project], transport=_transport).snapshot_history()
    with pytest.raises(UntrustedPathError) as again:
        adapter.snapshot_history()
    assert again.value.code == fresh.value.code == "trusted-project-root-untrusted"


def test_the_adapter_reads_a_replaced_file_with_another_header_whole(projects, tmp_path):
    project, _ = projects
    path = project / "session.jsonl"
    _session(path, project, "first")
    adapter = PiSessionAdapter(path, trusted_roots=[project], transport=_transport)
    adapter.snapshot_history()
    replacement = tmp_path / "replacement.jsonl"
    ids = _session(replacement, project, "FIRST", "second", timestamp="2026-01-02T00:00:00.000Z")
    os.replace(replacement, path)

    snapshot = adapter.snapshot_history()
    assert [message.source_entry_id for message in snapshot.messages] == ids
    assert "FIRST" in _texts(snapshot)
    fresh = PiSessionAdapter(path, trusted_roots=[project], transport=_transport).snapshot_history()
    assert snapshot.revision == fresh.revision
    assert snapshot.messages == fresh.messages


def test_the_workspace_reads_a_replaced_file_with_another_header_whole(projects, tmp_path):
    project, _ = projects
    path = project / "session.jsonl"
    _session(path, project, "first")
    workspace = ContextWorkspace.open(path, no_store=True)
    revision = workspace.revision
    replacement = tmp_path / "replacement.jsonl"
    ids = _session(replacement, project, "FIRST", "second", timestamp="2026-01-02T00:00:00.000Z")
    os.replace(replacement, path)

    session = workspace.refresh()
    fresh = read_pi_session(path)
    assert [entry.id for entry in session.entries] == ids == [entry.id for entry in fresh.entries]
    assert [entry.data for entry in session.entries] == [entry.data for entry in fresh.entries]
    assert session.header == fresh.header
    assert session.header.timestamp == "2026-01-02T00:00:00.000Z"
    assert workspace.revision != revision
    assert workspace.revision == ContextWorkspace.open(path, no_store=True).revision


@pytest.fixture
def full_reads(monkeypatch):
    """How many times a session was parsed from its first byte."""
    calls: list[str] = []
    original = view_module.read_pi_session_bytes

    def counting(data, **kwargs):
        calls.append(kwargs.get("path", ""))
        return original(data, **kwargs)

    monkeypatch.setattr(view_module, "read_pi_session_bytes", counting)
    return calls


def test_an_append_still_extends_the_adapters_session_incrementally(projects, full_reads):
    project, _ = projects
    path = project / "session.jsonl"
    ids = _session(path, project, "hello")
    adapter = PiSessionAdapter(path, trusted_roots=[project], transport=_transport)
    first = adapter.snapshot_history()
    assert adapter.snapshot_history() == first  # unchanged file: nothing read again
    for number in range(3):
        ids.append(append_pi_entry(path, "message", _message(f"note {number}", number)).id)
        snapshot = adapter.snapshot_history()
        assert [message.source_entry_id for message in snapshot.messages] == ids
    assert snapshot.messages[:1] == first.messages
    assert len(full_reads) == 1  # the first snapshot only
    fresh = PiSessionAdapter(path, trusted_roots=[project], transport=_transport).snapshot_history()
    assert snapshot.revision == fresh.revision


def test_an_append_still_extends_the_workspaces_session_incrementally(projects, full_reads):
    project, _ = projects
    path = project / "session.jsonl"
    ids = _session(path, project, "hello")
    workspace = ContextWorkspace.open(path, no_store=True)
    before = workspace.session
    assert workspace.refresh() is before  # unchanged file: the same session
    entry = append_pi_entry(path, "message", _message("more"))
    after = workspace.refresh()
    assert [e.id for e in after.entries] == [*ids, entry.id]
    # the entries read before are the very same objects: only the appended line was parsed
    assert all(old is new for old, new in zip(before.entries, after.entries, strict=False))
    assert len(full_reads) == 1  # the opening only
    assert workspace.revision == ContextWorkspace.open(path, no_store=True).revision
