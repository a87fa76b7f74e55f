"""Creating Pi session files and appending entries to them.

An append is one ``write`` of one whole line on a descriptor opened with ``O_APPEND``, under an exclusive
``flock`` so that concurrent appenders get distinct ids and a consistent leaf. A file whose last line is
torn is refused rather than extended: appending after a partial line would glue two records together.
Existing bytes are never rewritten.

Appending must know the file's ids and leaf. Reading the whole file for each append made a long agent
turn quadratic (85 ms a step at 1,000 messages), so the writer remembers what its own last append left
(size, modification time, the last bytes) per file; when the file under the lock is still exactly that,
nothing is re-read. Any other writer changes size or time or the tail, and the file is read again.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import stat
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import msgspec

from ds4_context_engine._exceptions import PiSessionWriteError
from ds4_context_engine._files import make_private_directories

from ._reader import PI_SESSION_VERSION, PiEntry, PiSessionHeader, entry_from_line, read_pi_session_bytes

__all__ = [
    "LEAF",
    "RESERVED_ENTRY_FIELDS",
    "append_pi_entries",
    "append_pi_entry",
    "create_pi_session",
    "iso_timestamp",
]

RESERVED_ENTRY_FIELDS: Final = ("id", "parentId", "timestamp", "type")
_ID_ATTEMPTS: Final = 64
_TAIL_BYTES: Final = 4096
_KNOWN_FILES: Final = 16
_encoder: Final = msgspec.json.Encoder()


class _Leaf:
    """Marker: attach the new entry to the current leaf (the newest entry)."""

    def __repr__(self) -> str:
        return "LEAF"


LEAF: Final = _Leaf()


def iso_timestamp(moment: datetime | None = None) -> str:
    """An ISO-8601 UTC timestamp with milliseconds and ``Z``, as Pi writes them."""
    value = (moment or datetime.now(UTC)).astimezone(UTC)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def create_pi_session(
    path: str | os.PathLike[str],
    *,
    cwd: str,
    session_id: str | None = None,
    parent_session: str | None = None,
    timestamp: str | None = None,
) -> PiSessionHeader:
    """Create a new v3 session file (mode 0600; a missing directory is created 0700). Never overwrites."""
    file_path = Path(path)
    make_private_directories(file_path.parent)
    header: dict[str, Any] = {
        "type": "session",
        "version": PI_SESSION_VERSION,
        "id": session_id or str(uuid.uuid4()),
        "timestamp": timestamp or iso_timestamp(),
        "cwd": cwd,
    }
    if parent_session is not None:
        header["parentSession"] = parent_session
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        descriptor = os.open(file_path, flags, 0o600)
    except FileExistsError as error:
        raise PiSessionWriteError(
            "pi-session-exists", f"{file_path}: refusing to overwrite a file"
        ) from error
    line = _encoder.encode(header) + b"\n"
    try:
        written = os.write(descriptor, line)
        if written == len(line):
            os.fsync(descriptor)
    except OSError:
        written = -1
    finally:
        os.close(descriptor)
    if written != len(line):
        # the file is ours alone (created exclusively a moment ago) and holds no whole header: remove it
        file_path.unlink(missing_ok=True)
        raise PiSessionWriteError(
            "pi-session-create-failed", f"{file_path}: the header was not written whole"
        )
    return PiSessionHeader(
        version=PI_SESSION_VERSION,
        id=header["id"],
        timestamp=header["timestamp"],
        cwd=cwd,
        parent_session=parent_session,
    )


class _Known:
    """What this process's last append left in one file: enough to append again without reading it."""

    __slots__ = ("end_line", "ids", "leaf_id", "mtime_ns", "size", "tail")

    def __init__(
        self, *, ids: set[str], leaf_id: str | None, end_line: int, size: int, mtime_ns: int, tail: bytes
    ) -> None:
        self.ids = ids
        self.leaf_id = leaf_id
        self.end_line = end_line
        self.size = size
        self.mtime_ns = mtime_ns
        self.tail = tail


# (device, inode) -> state; bounded, the oldest forgotten first (a forgotten file is simply read again)
_known: dict[tuple[int, int], _Known] = {}


def _still_known(descriptor: int, status: os.stat_result) -> _Known | None:
    known = _known.get((status.st_dev, status.st_ino))
    if known is None or known.size != status.st_size or known.mtime_ns != status.st_mtime_ns:
        return None
    start = max(0, status.st_size - _TAIL_BYTES)
    if os.pread(descriptor, status.st_size - start, start) != known.tail:
        return None
    return known


def _remember(descriptor: int, known: _Known) -> None:
    status = os.fstat(descriptor)
    start = max(0, status.st_size - _TAIL_BYTES)
    known.size, known.mtime_ns = status.st_size, status.st_mtime_ns
    known.tail = os.pread(descriptor, status.st_size - start, start)
    key = (status.st_dev, status.st_ino)
    _known.pop(key, None)
    _known[key] = known
    while len(_known) > _KNOWN_FILES:
        del _known[next(iter(_known))]


def _read_state(descriptor: int, file_path: Path) -> _Known:
    data = _read_locked(descriptor)
    if data and not data.endswith(b"\n"):
        raise PiSessionWriteError(
            "pi-session-torn-tail", f"{file_path}: the last line is incomplete; refusing to append"
        )
    session = read_pi_session_bytes(data, path=str(file_path))
    return _Known(
        ids={entry.id for entry in session.entries},
        leaf_id=session.leaf_id,
        end_line=session.end_line,
        size=len(data),
        mtime_ns=0,
        tail=b"",
    )


def _read_locked(descriptor: int) -> bytes:
    size = os.fstat(descriptor).st_size
    chunks: list[bytes] = []
    offset = 0
    while offset < size:
        chunk = os.pread(descriptor, size - offset, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _fresh_id(existing: set[str], taken: set[str]) -> str:
    for _ in range(_ID_ATTEMPTS):
        candidate = secrets.token_hex(4)
        if candidate not in existing and candidate not in taken:
            return candidate
    raise PiSessionWriteError("pi-entry-id-exhausted", "could not draw an unused 8-hex entry id")


def append_pi_entry(
    path: str | os.PathLike[str],
    entry_type: str,
    fields: Mapping[str, Any],
    *,
    parent_id: str | _Leaf | None = LEAF,
    timestamp: str | None = None,
) -> PiEntry:
    """Append one entry as a whole line and return it as written.

    ``fields`` are the type-specific fields (``message``, ``customType`` ...); ``id``, ``parentId``,
    ``timestamp`` and ``type`` are filled in here. ``parent_id`` defaults to the current leaf; pass an
    existing id to start a branch, or ``None`` for a new root.
    """
    (entry,) = append_pi_entries(path, [(entry_type, fields)], parent_id=parent_id, timestamp=timestamp)
    return entry


def append_pi_entries(
    path: str | os.PathLike[str],
    entries: Sequence[tuple[str, Mapping[str, Any]]],
    *,
    parent_id: str | _Leaf | None = LEAF,
    timestamp: str | None = None,
) -> tuple[PiEntry, ...]:
    """Append several entries in one locked write, each the child of the one before.

    The first entry hangs off ``parent_id`` (default: the current leaf). Either every line is written
    or, when validation fails, none is.
    """
    file_path = Path(path)
    for entry_type, fields in entries:
        if not entry_type or any(key in fields for key in RESERVED_ENTRY_FIELDS):
            raise PiSessionWriteError(
                "pi-entry-fields-invalid", "entry fields may not set id, parentId, timestamp or type"
            )
    flags = os.O_RDWR | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        descriptor = os.open(file_path, flags)
    except FileNotFoundError as error:
        raise PiSessionWriteError("pi-session-not-found", f"{file_path}: no such session file") from error
    except OSError as error:
        raise PiSessionWriteError("pi-session-unwritable", f"{file_path}: cannot open for append") from error
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise PiSessionWriteError("pi-session-unwritable", f"{file_path}: not a regular file")
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        status = os.fstat(descriptor)
        state = _still_known(descriptor, status) or _read_state(descriptor, file_path)
        parent = state.leaf_id if isinstance(parent_id, _Leaf) else parent_id
        if parent is not None and parent not in state.ids:
            raise PiSessionWriteError("pi-parent-unknown", "the parent id is not an entry of this session")
        taken: set[str] = set()
        written: list[PiEntry] = []
        lines: list[bytes] = []
        offset = status.st_size
        line_number = state.end_line
        for entry_type, fields in entries:
            entry_id = _fresh_id(state.ids, taken)
            taken.add(entry_id)
            record: dict[str, Any] = {
                "type": entry_type,
                "id": entry_id,
                "parentId": parent,
                "timestamp": timestamp or iso_timestamp(),
                **fields,
            }
            try:
                line = _encoder.encode(record) + b"\n"
            except (TypeError, msgspec.EncodeError) as error:
                raise PiSessionWriteError("pi-entry-fields-invalid", "entry fields are not JSON") from error
            line_number += 1
            written.append(
                entry_from_line(entry_type, entry_id, parent, line=line_number, offset=offset, text=line[:-1])
            )
            lines.append(line)
            offset += len(line)
            parent = entry_id
        payload = b"".join(lines)
        if os.write(descriptor, payload) != len(payload):
            raise PiSessionWriteError(
                "pi-append-short-write", f"{file_path}: the lines were not written whole"
            )
        os.fsync(descriptor)
        state.ids.update(taken)
        state.leaf_id, state.end_line = parent, line_number
        _remember(descriptor, state)
    finally:
        os.close(descriptor)
    return tuple(written)
