"""Fault injection: killed writers, concurrent appenders, full disks, refused permissions, hostile files."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from reference_helpers import RUNTIME, SESSION, make_message

from ds4_context_core import TextBlock
from ds4_context_reference_adapter import (
    ReferenceHistoryError,
    append_reference_history_message,
    create_reference_history,
    read_reference_history,
)

HELPERS = str(Path(__file__).parent)


def _run_python(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script, HELPERS, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_writer_killed_mid_append_leaves_a_torn_record_that_reads_reject_untouched(history):
    append_reference_history_message(history, make_message("u1"))
    intact = history.read_bytes()
    killer = (
        "import os, signal, sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from reference_helpers import make_message\n"
        "from ds4_context_reference_adapter import append_reference_history_message\n"
        "real_write = os.write\n"
        "def write_half_then_die(fd, data):\n"
        "    real_write(fd, bytes(data)[: len(data) // 2])\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "os.write = write_half_then_die\n"
        "append_reference_history_message(sys.argv[2], make_message('u2'))\n"
    )
    result = _run_python(killer, str(history))
    assert result.returncode == -signal.SIGKILL
    torn = history.read_bytes()
    assert torn.startswith(intact)
    assert len(torn) > len(intact)
    assert not torn.endswith(b"\n")

    with pytest.raises(ReferenceHistoryError) as caught:
        read_reference_history(history)
    assert (caught.value.code, caught.value.reason, caught.value.line) == (
        "canonical-history-read-failed",
        "unterminated-record",
        3,
    )
    # The dead writer's lock is gone with it: a new append is refused at once instead of blocking,
    # and refuses to glue a record onto the torn one.
    with pytest.raises(ReferenceHistoryError) as caught:
        append_reference_history_message(history, make_message("u3"))
    assert caught.value.code == "canonical-history-read-failed"
    assert history.read_bytes() == torn


@pytest.fixture
def memory_backed_history(project: Path) -> Iterator[Path]:
    # tmpfs when there is one: the test is about locking, and 8,000 syncs to a busy disk measure the disk.
    base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    scratch = Path(tempfile.mkdtemp(prefix="ds4-ref-concurrency-", dir=base))
    try:
        path = scratch / "session.jsonl"
        create_reference_history(path, session_id=SESSION, project_root=project)
        yield path
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def test_eight_processes_appending_a_thousand_records_each_lose_and_mix_nothing(memory_backed_history):
    history = memory_backed_history
    writer = (
        "import sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from reference_helpers import make_message\n"
        "from ds4_context_reference_adapter import append_reference_history_message\n"
        "worker = sys.argv[3]\n"
        "for number in range(1000):\n"
        "    append_reference_history_message(sys.argv[2], make_message(f'w{worker}-{number}'))\n"
    )
    processes = [
        subprocess.Popen([sys.executable, "-c", writer, HELPERS, str(history), str(worker)])
        for worker in range(8)
    ]
    assert [process.wait(timeout=300) for process in processes] == [0] * 8

    loaded = read_reference_history(history)
    assert len(loaded.messages) == 8000
    by_worker: dict[str, list[int]] = {}
    for message in loaded.messages:
        worker, number = message.source_entry_id[1:].split("-")
        by_worker.setdefault(worker, []).append(int(number))
    assert by_worker == {str(worker): list(range(1000)) for worker in range(8)}


def test_threads_racing_to_append_the_same_id_leave_exactly_one_record(history):
    outcomes: list[str] = []
    barrier = threading.Barrier(8)

    def append_same() -> None:
        barrier.wait()
        try:
            append_reference_history_message(history, make_message("same"))
            outcomes.append("appended")
        except ReferenceHistoryError as error:
            outcomes.append(error.reason)

    threads = [threading.Thread(target=append_same) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["appended"] + ["message-id-duplicate"] * 7
    assert [m.id for m in read_reference_history(history).messages] == [f"{SESSION}:same"]


def test_a_disk_full_error_mid_record_removes_the_partial_bytes(history, monkeypatch):
    append_reference_history_message(history, make_message("u1"))
    before = history.read_bytes()
    real_write = os.write

    def half_then_disk_full(fd: int, data: bytes) -> int:
        if len(data) > 1:
            return real_write(fd, bytes(data)[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_disk_full)
    with pytest.raises(ReferenceHistoryError) as caught:
        append_reference_history_message(history, make_message("u2", TextBlock(text="x")))
    monkeypatch.undo()
    assert (caught.value.code, caught.value.reason, caught.value.errno) == (
        "reference-history-write-failed",
        "disk-full",
        errno.ENOSPC,
    )
    assert history.read_bytes() == before
    append_reference_history_message(history, make_message("u2"))
    assert [m.source_entry_id for m in read_reference_history(history).messages] == ["u1", "u2"]


def test_a_failed_fsync_removes_the_record_it_could_not_make_durable(history, monkeypatch):
    before = history.read_bytes()

    def failing_fsync(fd: int) -> None:
        monkeypatch.undo()  # only the first sync fails; the undo's own sync then succeeds
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(ReferenceHistoryError) as caught:
        append_reference_history_message(history, make_message("u1"))
    assert (caught.value.code, caught.value.reason) == ("reference-history-write-failed", "io-error")
    assert history.read_bytes() == before


def test_a_disk_full_create_leaves_no_file_behind(tmp_path, project, monkeypatch):
    def disk_full(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", disk_full)
    path = tmp_path / "h.jsonl"
    with pytest.raises(ReferenceHistoryError) as caught:
        create_reference_history(path, session_id=SESSION, project_root=project)
    assert (caught.value.code, caught.value.reason) == ("reference-history-write-failed", "disk-full")
    assert not path.exists()


def _can_mount() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("mount") is not None


@contextlib.contextmanager
def _tmpfs(options: str) -> Iterator[Path]:
    mountpoint = Path(tempfile.mkdtemp(prefix="ds4-ref-tmpfs-"))
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mountpoint)], check=False)
    if mounted.returncode != 0:
        mountpoint.rmdir()
        pytest.skip("tmpfs cannot be mounted here")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", str(mountpoint)], check=True)
        mountpoint.rmdir()


@pytest.mark.skipif(not _can_mount(), reason="a real full disk needs root to mount a tiny tmpfs")
def test_a_really_full_tmpfs_surfaces_disk_full_with_the_file_intact(project):
    with _tmpfs("size=64k,mode=0700") as disk:
        path = disk / "h.jsonl"
        create_reference_history(path, session_id=SESSION, project_root=project)
        big = "y" * 6000
        caught = None
        for number in range(100):
            before = path.read_bytes()
            try:
                append_reference_history_message(path, make_message(f"u{number}", TextBlock(text=big)))
            except ReferenceHistoryError as error:
                caught = error
                break
        assert caught is not None
        assert (caught.code, caught.reason) == ("reference-history-write-failed", "disk-full")
        assert path.read_bytes() == before
        assert len(read_reference_history(path).messages) == number


@pytest.mark.skipif(not _can_mount(), reason="a read-only filesystem needs root to mount one")
def test_a_read_only_filesystem_refuses_writes_clearly_and_still_reads(project):
    with _tmpfs("size=1m,mode=0700") as disk:
        path = disk / "h.jsonl"
        create_reference_history(path, session_id=SESSION, project_root=project)
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        before = path.read_bytes()
        with pytest.raises(ReferenceHistoryError) as caught:
            append_reference_history_message(path, make_message("u1"))
        assert (caught.value.code, caught.value.reason) == (
            "reference-history-write-failed",
            "permission-denied",
        )
        with pytest.raises(ReferenceHistoryError) as caught:
            create_reference_history(disk / "new.jsonl", session_id=SESSION, project_root=project)
        assert (caught.value.code, caught.value.reason) == (
            "reference-history-write-failed",
            "permission-denied",
        )
        assert path.read_bytes() == before
        assert read_reference_history(path).messages == ()


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root ignores file modes")
def test_file_modes_that_refuse_access_surface_as_permission_errors(history, tmp_path, project):
    before = history.read_bytes()
    history.chmod(0o400)
    with pytest.raises(ReferenceHistoryError) as caught:
        append_reference_history_message(history, make_message("u1"))
    assert (caught.value.code, caught.value.reason) == ("reference-history-write-failed", "permission-denied")
    history.chmod(0o000)
    with pytest.raises(ReferenceHistoryError) as caught:
        read_reference_history(history)
    assert (caught.value.code, caught.value.reason) == ("canonical-history-read-failed", "permission-denied")
    history.chmod(0o600)
    assert history.read_bytes() == before
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(ReferenceHistoryError) as caught:
        create_reference_history(locked / "h.jsonl", session_id=SESSION, project_root=project)
    assert (caught.value.code, caught.value.reason) == ("reference-history-write-failed", "permission-denied")


def _header(project: Path) -> bytes:
    return (
        json.dumps(
            {
                "type": "ds4-runtime-session-v1",
                "runtimeId": RUNTIME,
                "sessionId": SESSION,
                "projectRoot": str(project),
            }
        ).encode()
        + b"\n"
    )


def _record_with_arguments(raw_arguments: bytes) -> bytes:
    message = make_message("a1", role="assistant")
    record = msgspec.json.encode({"type": "message", "message": message})
    placeholder = b'"blocks":[{"type":"text","text":"text of a1"}]'
    call = b'"blocks":[{"type":"toolCall","id":"c1","name":"read","arguments":' + raw_arguments + b"}]"
    assert placeholder in record
    return record.replace(placeholder, call) + b"\n"


def _hostile(project: Path, kind: str) -> bytes:
    header = _header(project)
    if kind == "huge-line":
        return header + b'{"type":"message","message":"' + b"a" * (24 * 1024 * 1024) + b'"}\n'
    if kind == "deep-nesting":
        depth = 1_000_000
        return header + _record_with_arguments(b'{"x":' + b"[" * depth + b"]" * depth + b"}")
    if kind == "invalid-utf-8":
        return header + _record_with_arguments(b'{"path":"\xff\xfe\xc0"}')
    if kind == "nul-bytes":
        return header + _record_with_arguments(b'{"path":"a\x00b"}') + b"\x00" * 4096 + b"\n"
    if kind == "tiny-lines":
        return header + b"{}\n" * 100_000
    if kind == "too-many-lines":
        return header + b"\n" * 150_000
    raise AssertionError(kind)


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("huge-line", "record-invalid"),
        ("deep-nesting", "nesting-too-deep"),
        ("invalid-utf-8", "record-invalid"),
        ("nul-bytes", "record-invalid"),
        ("tiny-lines", "record-invalid"),
        ("too-many-lines", "too-many-messages"),
    ],
)
def test_hostile_files_are_rejected_quickly_with_bounded_memory(tmp_path, project, kind, reason):
    path = tmp_path / "hostile.jsonl"
    path.write_bytes(_hostile(project, kind))
    size = path.stat().st_size
    before = path.read_bytes()
    tracemalloc.start()
    started = time.process_time()  # CPU time: another process's load does not count
    try:
        with pytest.raises(ReferenceHistoryError) as caught:
            read_reference_history(path)
        elapsed = time.process_time() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (caught.value.code, caught.value.reason) == ("canonical-history-read-failed", reason)
    assert elapsed < 2.0
    # The raw bytes plus one line slice, at most: nothing proportional to a decoded history.
    assert peak < 2 * size + 2 * 1024 * 1024
    assert path.read_bytes() == before


def test_a_file_over_the_size_limit_is_rejected_without_being_read(tmp_path, project):
    path = tmp_path / "oversized.jsonl"
    path.write_bytes(_header(project))
    with path.open("r+b") as handle:
        handle.truncate(64 * 1024 * 1024 + 1)  # sparse: costs no disk
    tracemalloc.start()
    try:
        with pytest.raises(ReferenceHistoryError) as caught:
            read_reference_history(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (caught.value.code, caught.value.reason) == ("canonical-history-read-failed", "file-too-large")
    assert peak < 1024 * 1024
    assert path.stat().st_size == 64 * 1024 * 1024 + 1
