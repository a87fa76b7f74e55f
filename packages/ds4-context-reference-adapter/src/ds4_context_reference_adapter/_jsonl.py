"""The ``ds4-runtime-session-v1`` file: one header line, then one canonical message record per line.

The file is canonical and append-only. Nothing in this module ever truncates, rewrites or repairs bytes
that were already in the file when an operation started: a reader opens it read-only, and an appender
only ever removes the bytes of its own failed write.

Concurrency: every appender takes an exclusive ``flock`` on its own open file description (so threads
of one process exclude each other as well as other processes), checks the file under the lock, then
adds the whole record with ``O_APPEND`` writes and ``fsync``. Readers take a shared lock, so they never
observe a record that is being written.

Appends stay linear over a session: each process keeps a small index per file (ids seen, byte offset
already checked) and, under the lock, reads only the bytes that other writers appended since.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import re
import stat
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Final, Literal

import msgspec

from ds4_context_core import (
    CanonicalMessage,
    HistoryRecordError,
    RuntimeHistorySnapshot,
    ToolCallBlock,
    ToolResultBlock,
)
from ds4_context_core.history import (
    HISTORY_MAX_IDENTIFIER_CHARS,
    build_runtime_history_snapshot,
    check_message_nesting,
    validate_runtime_history_snapshot,
)

from ._exceptions import (
    ReferenceConfigError,
    ReferenceHistoryError,
    ReferenceHistoryExistsError,
    ReferenceHistoryIdentityError,
    ReferenceHistoryInvalidError,
    ReferenceHistoryLimitError,
    ReferenceHistoryReadError,
    ReferenceHistoryWriteError,
    ReferenceMessageRejectedError,
)

__all__ = [
    "DEFAULT_MAX_FILE_BYTES",
    "DEFAULT_MAX_MESSAGES",
    "DEFAULT_RUNTIME_ID",
    "REFERENCE_HISTORY_FORMAT",
    "AppendedRecord",
    "ReferenceHistory",
    "ReferenceHistoryHeader",
    "ReferenceHistoryLimits",
    "append_reference_history_message",
    "create_reference_history",
    "read_reference_history",
    "read_reference_history_header",
]

REFERENCE_HISTORY_FORMAT: Final = "ds4-runtime-session-v1"
DEFAULT_RUNTIME_ID: Final = "jsonl-reference"
DEFAULT_MAX_FILE_BYTES: Final = 64 * 1024 * 1024
DEFAULT_MAX_MESSAGES: Final = 100_000

_FILE_MODE: Final = 0o600
_DIRECTORY_MODE: Final = 0o700
_READ_CHUNK: Final = 1 << 20
# A header is three identifiers and a path; anything longer is not a header.
_HEADER_MAX_BYTES: Final = 16 * 1024
# Processes appending to many files keep at most this many per-file indexes.
_INDEX_CACHE_SIZE: Final = 16
_INDEX_TAIL_BYTES: Final = 4096
_CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class ReferenceHistoryHeader(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    rename="camel",
    tag_field="type",
    tag=REFERENCE_HISTORY_FORMAT,
):
    """Line 1 of the file: binds the runtime, the session and the canonical (realpath) project root."""

    runtime_id: str
    session_id: str
    project_root: str


class ReferenceHistoryLimits(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Bounds enforced on every read and append; a file over them is rejected, never cut."""

    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    max_messages: int = DEFAULT_MAX_MESSAGES

    def __post_init__(self) -> None:
        for name in ("max_file_bytes", "max_messages"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ReferenceConfigError(f"{name} must be a positive integer")


class ReferenceHistory(msgspec.Struct, frozen=True, kw_only=True):
    """A fully read and validated history file.

    ``snapshot`` is its ``runtime-history-v1`` projection; its revision is the sha256 of the exact bytes read.
    """

    header: ReferenceHistoryHeader
    snapshot: RuntimeHistorySnapshot
    size_bytes: int

    @property
    def messages(self) -> tuple[CanonicalMessage, ...]:
        return self.snapshot.messages

    @property
    def revision(self) -> str:
        return self.snapshot.revision

    @property
    def snapshot_lines(self) -> int:
        """Complete lines in the file as read: the header plus one per message."""
        return len(self.snapshot.messages) + 1


class AppendedRecord(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Where an append landed: 1-based line, byte offset and length of the record (newline included)."""

    message_id: str
    line: int
    offset: int
    length: int


class _HeaderLine(msgspec.Struct, frozen=True, rename="camel"):
    type: Literal["ds4-runtime-session-v1"]
    runtime_id: str
    session_id: str
    project_root: str


class _MessageLine(msgspec.Struct, frozen=True):
    type: Literal["message"]
    message: CanonicalMessage


class _MessageRecord(msgspec.Struct, frozen=True, tag_field="type", tag="message"):
    message: CanonicalMessage


_header_decoder = msgspec.json.Decoder(_HeaderLine)
_message_decoder = msgspec.json.Decoder(_MessageLine)
_encoder = msgspec.json.Encoder()


def _identifier_problem(value: object) -> str | None:
    if not isinstance(value, str) or not value:
        return "is empty"
    if value.isspace():
        return "is blank"
    if len(value) > HISTORY_MAX_IDENTIFIER_CHARS:
        return f"is longer than {HISTORY_MAX_IDENTIFIER_CHARS} characters"
    if _CONTROL_CHARACTERS.search(value):
        return "contains control characters"
    return None


def _require_identifier(name: str, value: object) -> None:
    problem = _identifier_problem(value)
    if problem is not None:
        raise ReferenceMessageRejectedError("identifier-invalid", f"{name} {problem}")


def _canonical_root(project_root: str | os.PathLike[str]) -> str:
    """The realpath of an existing directory; symlinks anywhere in the path are resolved."""
    try:
        resolved = os.path.realpath(os.fspath(project_root), strict=True)
    except (OSError, ValueError):
        raise ReferenceHistoryIdentityError(
            "project-root-untrusted", "the project root does not exist or cannot be resolved"
        ) from None
    if not os.path.isdir(resolved):
        raise ReferenceHistoryIdentityError("project-root-untrusted", "the project root is not a directory")
    return resolved


class _HistoryIndex:
    """What an appender must know about the records already in one file, built incrementally."""

    __slots__ = ("call_ids", "checked_bytes", "header", "header_bytes", "message_ids", "messages", "tail")

    def __init__(self, header: ReferenceHistoryHeader, checked_bytes: int, header_bytes: bytes = b"") -> None:
        self.header = header
        self.checked_bytes = checked_bytes
        # The header line and the bytes just before ``checked_bytes`` identify the content indexed, so a
        # new file that reuses the inode number of a deleted one is never mistaken for it.
        self.header_bytes = header_bytes
        self.tail = b""
        self.message_ids: set[str] = set()
        self.call_ids: set[str] = set()
        self.messages = 0

    def check_existing(self, message: CanonicalMessage, line: int) -> None:
        """A record read from the file: identity, provenance and duplicate ids, with its line number."""
        problem = self._provenance_problem(message)
        if problem is not None:
            raise ReferenceHistoryInvalidError(*problem, line=line)
        if message.id in self.message_ids:
            raise ReferenceHistoryInvalidError("message-id-duplicate", "a message id repeats", line=line)

    def check_candidate(self, message: CanonicalMessage) -> None:
        """A message about to be appended: everything ``check_existing`` checks, plus tool call links."""
        problem = self._provenance_problem(message)
        if problem is not None:
            raise ReferenceMessageRejectedError(*problem)
        if message.id in self.message_ids:
            raise ReferenceMessageRejectedError("message-id-duplicate", "the message id is already recorded")
        own_calls: set[str] = set()
        for block in message.blocks:
            if type(block) is ToolCallBlock:
                _require_identifier("a tool call id", block.id)
                if block.id in self.call_ids or block.id in own_calls:
                    raise ReferenceMessageRejectedError(
                        "tool-call-duplicate", "the tool call id is already used"
                    )
                own_calls.add(block.id)
        for block in message.blocks:
            if type(block) is ToolResultBlock and not (
                block.tool_call_id in self.call_ids or block.tool_call_id in own_calls
            ):
                raise ReferenceMessageRejectedError(
                    "tool-result-orphaned", "a tool result answers a call that is not in the history"
                )

    def extend_tail(self, data: bytes) -> None:
        self.tail = (self.tail + data[-_INDEX_TAIL_BYTES:])[-_INDEX_TAIL_BYTES:]

    def matches(self, fd: int, size: int) -> bool:
        """Whether the file behind ``fd`` still starts with the bytes this index was built from."""
        if self.checked_bytes > size:
            return False
        if os.pread(fd, len(self.header_bytes), 0) != self.header_bytes:
            return False
        return os.pread(fd, len(self.tail), self.checked_bytes - len(self.tail)) == self.tail

    def admit(self, message: CanonicalMessage) -> None:
        self.message_ids.add(message.id)
        for block in message.blocks:
            if type(block) is ToolCallBlock:
                self.call_ids.add(block.id)
        self.messages += 1

    def _provenance_problem(self, message: CanonicalMessage) -> tuple[str, str] | None:
        for name, value in (
            ("the message id", message.id),
            ("the source entry id", message.source_entry_id),
            ("the provenance entry id", message.provenance.entry_id),
        ):
            problem = _identifier_problem(value)
            if problem is not None:
                return "identifier-invalid", f"{name} {problem}"
        provenance = message.provenance
        if provenance.source != "runtime-session":
            return "provenance-mismatch", "provenance source must be runtime-session"
        if provenance.session_id != self.header.session_id:
            return "provenance-mismatch", "provenance session id differs from the header's"
        if provenance.runtime_id != self.header.runtime_id:
            return "provenance-mismatch", "provenance runtime id differs from the header's"
        if message.source_entry_id != provenance.entry_id:
            return "provenance-mismatch", "source entry id differs from the provenance entry id"
        return None


def _decode_header(line: bytes) -> ReferenceHistoryHeader:
    try:
        decoded = _header_decoder.decode(line)
    except (msgspec.DecodeError, RecursionError):
        raise ReferenceHistoryReadError(
            "header-invalid", f"line 1 is not a {REFERENCE_HISTORY_FORMAT} header", line=1
        ) from None
    for name, value in (
        ("runtime id", decoded.runtime_id),
        ("session id", decoded.session_id),
        ("project root", decoded.project_root),
    ):
        problem = _identifier_problem(value) if name != "project root" else None
        if problem is not None:
            raise ReferenceHistoryReadError("header-invalid", f"the header {name} {problem}", line=1)
    if not os.path.isabs(decoded.project_root) or "\0" in decoded.project_root:
        raise ReferenceHistoryReadError("header-invalid", "the header project root is not absolute", line=1)
    return ReferenceHistoryHeader(
        runtime_id=decoded.runtime_id, session_id=decoded.session_id, project_root=decoded.project_root
    )


def _check_nesting(messages: list[CanonicalMessage], first_line: int) -> None:
    """Core's nesting limit, the one every canonical decoder applies, with the file line of a failure."""
    try:
        check_message_nesting(messages, first_line=first_line)
    except HistoryRecordError as error:
        raise ReferenceHistoryReadError(
            "nesting-too-deep", "the record nests deeper than the history format allows", line=error.line
        ) from None


def _decode_message(line: bytes, line_number: int) -> CanonicalMessage:
    try:
        message: CanonicalMessage = _message_decoder.decode(line).message
    except msgspec.DecodeError:
        # The decoder's own text may quote record values, so it is never passed on.
        raise ReferenceHistoryReadError(
            "record-invalid", "the record is not a valid message record", line=line_number
        ) from None
    except RecursionError:
        raise ReferenceHistoryReadError(
            "nesting-too-deep", "the record nests deeper than the decoder allows", line=line_number
        ) from None
    _check_nesting([message], line_number)
    return message


def _decode_records(data: bytes, start: int, lines_before: int = 1) -> list[CanonicalMessage]:
    """Decode every record in ``data[start:]`` (which ends with a newline), without per-record checks.

    Lines are sliced one at a time, so a hostile file of tiny lines costs no memory beyond its bytes
    and the records decoded before the first bad one.
    """
    decode = _message_decoder.decode
    find = data.index
    view = memoryview(data)  # lines are decoded where they lie, not copied first
    messages: list[CanonicalMessage] = []
    append = messages.append
    position = start
    end = len(data)
    try:
        while position < end:
            newline = find(b"\n", position)
            append(decode(view[position:newline]).message)
            position = newline + 1
    except (msgspec.DecodeError, RecursionError):
        _decode_message(data[position:newline], lines_before + len(messages) + 1)  # raises the coded error
        raise  # pragma: no cover - the line failed once, so it fails again
    _check_nesting(messages, lines_before + 1)
    return messages


def _scan_records(data: bytes, start: int, first_line: int, index: _HistoryIndex) -> None:
    """Decode, check and index the records in ``data[start:]``; ``data`` must end with a newline."""
    line_number = first_line
    position = start
    end = len(data)
    while position < end:
        newline = data.index(b"\n", position)
        message = _decode_message(data[position:newline], line_number)
        index.check_existing(message, line_number)
        index.admit(message)
        position = newline + 1
        line_number += 1


def _check_shape(data: bytes, lines_before: int, limits: ReferenceHistoryLimits) -> None:
    """Cheap whole-buffer checks made before anything is decoded.

    ``data`` continues a file that already has ``lines_before`` complete lines (0: ``data`` is the whole
    file, header included).
    """
    newlines = data.count(b"\n")
    messages = max(lines_before + newlines - 1, 0)
    if messages > limits.max_messages:
        raise ReferenceHistoryReadError(
            "too-many-messages", f"the file holds more than {limits.max_messages} messages"
        )
    if data and not data.endswith(b"\n"):
        raise ReferenceHistoryReadError(
            "unterminated-record", "the last record has no final newline", line=lines_before + newlines + 1
        )


def _os_error(error: OSError, action: str) -> ReferenceHistoryError:
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return ReferenceHistoryWriteError(
            "permission-denied", f"{action}: permission denied", errno=error.errno
        )
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return ReferenceHistoryWriteError(
            "disk-full", f"{action}: no space left on the device", errno=error.errno
        )
    name = errno.errorcode.get(error.errno or 0, "unknown")
    return ReferenceHistoryWriteError(
        "io-error", f"{action}: operating system error {name}", errno=error.errno
    )


def _read_range(fd: int, start: int, length: int) -> bytes:
    chunks: list[bytes] = []
    remaining = length
    offset = start
    while remaining > 0:
        chunk = os.pread(fd, min(remaining, _READ_CHUNK), offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _open_for_reading(path: str | os.PathLike[str]) -> int:
    try:
        # O_NONBLOCK keeps a FIFO planted at the path from blocking the reader forever.
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ReferenceHistoryReadError("file-missing", "the history file does not exist") from None
    except PermissionError:
        raise ReferenceHistoryReadError("permission-denied", "the history file cannot be opened") from None
    except OSError:
        raise ReferenceHistoryReadError("io-error", "the history file cannot be opened") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ReferenceHistoryReadError("not-a-regular-file", "the history path is not a regular file")
    return fd


def read_reference_history(
    path: str | os.PathLike[str],
    *,
    limits: ReferenceHistoryLimits | None = None,
    runtime_id: str | None = None,
    session_id: str | None = None,
    trusted_project_root: str | os.PathLike[str] | None = None,
    previous: ReferenceHistory | None = None,
) -> ReferenceHistory:
    """Read and check a whole history file without ever modifying it.

    The header's project root must be canonical (its own realpath, an existing directory). When
    ``trusted_project_root`` is given, its realpath must equal the header's; when ``runtime_id`` or
    ``session_id`` are given they must equal the header's. Raises a ``ReferenceHistoryError`` whose
    ``code`` is ``canonical-history-read-failed``, ``canonical-history-identity-mismatch`` or
    ``canonical-history-invalid``.

    ``previous`` is an earlier result for the same path: when the bytes read now hash to its revision,
    the identity checks are repeated and it is returned as it is; when they only extend those bytes,
    just the appended records are decoded (the whole history is still validated).
    """
    limits = limits or ReferenceHistoryLimits()
    fd = _open_for_reading(path)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            size = os.fstat(fd).st_size
            if size > limits.max_file_bytes:
                raise ReferenceHistoryReadError(
                    "file-too-large", f"the file is larger than {limits.max_file_bytes} bytes"
                )
            data = _read_range(fd, 0, limits.max_file_bytes + 1)
        except OSError:
            raise ReferenceHistoryReadError(
                "io-error", "the history file could not be locked or read"
            ) from None
    finally:
        os.close(fd)
    if len(data) > limits.max_file_bytes:
        raise ReferenceHistoryReadError(
            "file-too-large", f"the file is larger than {limits.max_file_bytes} bytes"
        )
    if not data:
        raise ReferenceHistoryReadError("empty-file", "the history file is empty", line=1)
    _check_shape(data, 0, limits)
    header_end = data.index(b"\n")
    header = _decode_header(data[:header_end])
    _check_identity(header, runtime_id, session_id, trusted_project_root)
    hasher = hashlib.sha256()
    reusable = previous is not None and previous.header == header and previous.size_bytes <= len(data)
    if reusable and previous is not None:
        hasher.update(memoryview(data)[: previous.size_bytes])
        reusable = hasher.copy().hexdigest() == previous.revision
        hasher.update(memoryview(data)[previous.size_bytes :])
    else:
        hasher.update(data)
    revision = hasher.hexdigest()
    if reusable and previous is not None:
        if previous.revision == revision:
            return previous
        # Only appended since: decode just the new records (validation below still sees them all).
        messages = [*previous.messages, *_decode_records(data, previous.size_bytes, previous.snapshot_lines)]
    else:
        messages = _decode_records(data, header_end + 1)
    size = len(data)
    del data  # the messages are decoded: grouping and validation need room more than the bytes
    snapshot = build_runtime_history_snapshot(
        runtime_id=header.runtime_id,
        session_id=header.session_id,
        revision=revision,
        project_root=header.project_root,
        messages=messages,
    )
    issues = validate_runtime_history_snapshot(snapshot)
    if issues:
        # Point at the first offending line when the problem is one the file format itself rules out.
        index = _HistoryIndex(header, size)
        for line_number, message in enumerate(messages, start=2):
            index.check_existing(message, line_number)
            index.admit(message)
        codes = ", ".join(sorted({issue.code for issue in issues}))
        raise ReferenceHistoryInvalidError(
            "snapshot-invalid", f"the history breaks canonical invariants ({codes})", issues=issues
        )
    return ReferenceHistory(header=header, snapshot=snapshot, size_bytes=size)


def read_reference_history_header(path: str | os.PathLike[str]) -> ReferenceHistoryHeader:
    """Only the header line (read with a small bound), for callers that need the identity up front."""
    fd = _open_for_reading(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        head = os.pread(fd, _HEADER_MAX_BYTES + 1, 0)
    except OSError:
        raise ReferenceHistoryReadError("io-error", "the history file could not be read") from None
    finally:
        os.close(fd)
    if not head:
        raise ReferenceHistoryReadError("empty-file", "the history file is empty", line=1)
    end = head.find(b"\n")
    if end < 0:
        if len(head) > _HEADER_MAX_BYTES:
            raise ReferenceHistoryReadError("header-invalid", "the header line is too long", line=1)
        raise ReferenceHistoryReadError("unterminated-record", "the header has no final newline", line=1)
    return _decode_header(head[:end])


def _check_identity(
    header: ReferenceHistoryHeader,
    runtime_id: str | None,
    session_id: str | None,
    trusted_project_root: str | os.PathLike[str] | None,
) -> None:
    if runtime_id is not None and header.runtime_id != runtime_id:
        raise ReferenceHistoryIdentityError("runtime-id-mismatch", "the header names another runtime")
    if session_id is not None and header.session_id != session_id:
        raise ReferenceHistoryIdentityError("session-id-mismatch", "the header names another session")
    try:
        canonical = os.path.realpath(header.project_root, strict=True)
    except (OSError, ValueError):
        raise ReferenceHistoryIdentityError(
            "project-root-untrusted", "the header's project root does not exist"
        ) from None
    if canonical != header.project_root or not os.path.isdir(canonical):
        raise ReferenceHistoryIdentityError(
            "project-root-not-canonical", "the header's project root is not a canonical directory path"
        )
    if trusted_project_root is not None and _canonical_root(trusted_project_root) != canonical:
        raise ReferenceHistoryIdentityError(
            "project-root-untrusted", "the header's project root is not the trusted project root"
        )


def _make_private_directories(directory: Path) -> None:
    """Create ``directory`` and each missing parent with :data:`_DIRECTORY_MODE`.

    ``Path.mkdir(parents=True)`` gives the mode to the last level only; the parents it makes follow the
    umask. A level another process makes at the same moment is left as that process made it.
    """
    missing: list[Path] = []
    current = directory
    while not current.exists() and not current.is_symlink() and current.parent != current:
        missing.append(current)
        current = current.parent
    for level in reversed(missing):
        try:
            level.mkdir(mode=_DIRECTORY_MODE)
        except FileExistsError:
            continue
        level.chmod(_DIRECTORY_MODE)  # mkdir's mode passes through the umask too


def create_reference_history(
    path: str | os.PathLike[str],
    *,
    session_id: str,
    project_root: str | os.PathLike[str],
    runtime_id: str = DEFAULT_RUNTIME_ID,
) -> ReferenceHistoryHeader:
    """Create a new history file holding only its header; never overwrites anything.

    The project root is stored as its realpath. A missing parent directory is created with mode 0700;
    an existing one is left as it is. The file is created exclusively with mode 0600 and synced to disk.
    """
    _require_identifier("the runtime id", runtime_id)
    _require_identifier("the session id", session_id)
    header = ReferenceHistoryHeader(
        runtime_id=runtime_id, session_id=session_id, project_root=_canonical_root(project_root)
    )
    target = Path(path)
    directory = target.parent
    try:
        _make_private_directories(directory)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, _FILE_MODE)
    except FileExistsError:
        raise ReferenceHistoryExistsError("a file already exists at the history path") from None
    except OSError as error:
        raise _os_error(error, "creating the history file") from None
    record = _encoder.encode(header) + b"\n"
    try:
        os.fchmod(fd, _FILE_MODE)
        _write_all(fd, record)
        os.fsync(fd)
    except OSError as error:
        os.close(fd)
        # The file is ours alone (created exclusively a moment ago), so removing it loses nothing.
        target.unlink(missing_ok=True)
        raise _os_error(error, "writing the history header") from None
    os.close(fd)
    _sync_directory(directory)
    return header


def _sync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems cannot sync directories; the file itself is already synced
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


_index_lock = threading.Lock()
_indexes: OrderedDict[tuple[int, int], _HistoryIndex] = OrderedDict()


def _cached_index(key: tuple[int, int]) -> _HistoryIndex | None:
    with _index_lock:
        index = _indexes.get(key)
        if index is not None:
            _indexes.move_to_end(key)
        return index


def _store_index(key: tuple[int, int], index: _HistoryIndex | None) -> None:
    with _index_lock:
        if index is None:
            _indexes.pop(key, None)
            return
        _indexes[key] = index
        _indexes.move_to_end(key)
        while len(_indexes) > _INDEX_CACHE_SIZE:
            _indexes.popitem(last=False)


def _catch_up(fd: int, key: tuple[int, int], size: int, limits: ReferenceHistoryLimits) -> _HistoryIndex:
    """The index of the file's current content, reading only what is new since this process last looked."""
    if size > limits.max_file_bytes:
        raise ReferenceHistoryReadError(
            "file-too-large", f"the file is larger than {limits.max_file_bytes} bytes"
        )
    index = _cached_index(key)
    try:
        if index is not None and not index.matches(fd, size):
            index = None  # not the content we indexed: start again from the first byte
        if index is None:
            data = _read_range(fd, 0, size)
            if not data:
                raise ReferenceHistoryReadError("empty-file", "the history file is empty", line=1)
            _check_shape(data, 0, limits)
            header_end = data.index(b"\n")
            index = _HistoryIndex(_decode_header(data[:header_end]), 0, data[: header_end + 1])
            _scan_records(data, header_end + 1, 2, index)
            index.extend_tail(data)
        elif index.checked_bytes < size:
            data = _read_range(fd, index.checked_bytes, size - index.checked_bytes)
            _check_shape(data, index.messages + 1, limits)
            _scan_records(data, 0, index.messages + 2, index)
            index.extend_tail(data)
    except OSError:
        _store_index(key, None)
        raise ReferenceHistoryReadError("io-error", "the history file could not be read") from None
    except ReferenceHistoryError:
        _store_index(key, None)
        raise
    index.checked_bytes = size
    return index


def _open_for_appending(path: str | os.PathLike[str]) -> tuple[int, tuple[int, int]]:
    """An exclusively locked descriptor on the regular file at ``path`` and its (device, inode) key."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ReferenceHistoryReadError("file-missing", "the history file does not exist") from None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise ReferenceHistoryReadError(
                "not-a-regular-file", "the history path is a symbolic link"
            ) from None
        raise _os_error(error, "opening the history file") from None
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise ReferenceHistoryReadError("not-a-regular-file", "the history path is not a regular file")
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError as error:
        os.close(fd)
        raise _os_error(error, "locking the history file") from None
    except BaseException:
        os.close(fd)
        raise
    return fd, (status.st_dev, status.st_ino)


def _write_durably(fd: int, key: tuple[int, int], size: int, record: bytes) -> None:
    """Write and sync ``record`` at the end of a locked file of ``size`` bytes, or leave it at ``size``."""
    try:
        _write_all(fd, record)
        os.fsync(fd)
    except OSError as error:
        _store_index(key, None)
        failure = _os_error(error, "appending the record")
        try:
            os.ftruncate(fd, size)  # only our own partial bytes are past ``size``: we hold the lock
            os.fsync(fd)
        except OSError:
            raise ReferenceHistoryWriteError(
                "write-interrupted",
                "the append failed and its partial record could not be removed",
                errno=error.errno,
            ) from None
        raise failure from None


def _encode_record(message: object) -> bytes:
    """The record line for ``message``, accepted only if the reader will decode it back.

    Python constructors of msgspec structs check no types and no length limits, so a message can be
    built that its own record line fails to decode (a text over 16 Mi characters, a 600-character tool
    name). Decoding the line with the reader's own decoder applies exactly the reader's limits (the
    annotated types of the canonical model, defined once in core), so reader and writer cannot drift.
    """
    if not isinstance(message, CanonicalMessage):
        raise ReferenceMessageRejectedError("record-invalid", "only a CanonicalMessage can be appended")
    try:
        record = _encoder.encode(_MessageRecord(message=message)) + b"\n"
    except (TypeError, ValueError, msgspec.EncodeError, OverflowError, RecursionError):
        # ValueError covers UnicodeEncodeError: a string holding a lone surrogate has no UTF-8 form.
        raise ReferenceMessageRejectedError("record-invalid", "the message has no JSON form") from None
    try:
        _message_decoder.decode(record)
    except msgspec.ValidationError as error:
        if "length <=" in str(error):
            raise ReferenceMessageRejectedError(
                "field-too-long", "a field is longer than the history format allows"
            ) from None
        raise ReferenceMessageRejectedError(
            "record-invalid", "the message would not read back as a valid message record"
        ) from None
    except (msgspec.DecodeError, RecursionError):
        raise ReferenceMessageRejectedError(
            "nesting-too-deep", "the message nests deeper than the history format allows"
        ) from None
    try:
        check_message_nesting((message,))
    except HistoryRecordError:
        raise ReferenceMessageRejectedError(
            "nesting-too-deep", "the message nests deeper than the history format allows"
        ) from None
    return record


def append_reference_history_message(
    path: str | os.PathLike[str],
    message: CanonicalMessage,
    *,
    limits: ReferenceHistoryLimits | None = None,
) -> AppendedRecord:
    """Append one canonical message as one record, synced to disk before returning.

    The message must carry ``runtime-session`` provenance naming the header's runtime and session, a
    new message id, and tool results only for calls already in the history (or in the message itself).
    Under the exclusive lock the existing file is checked first, so nothing is ever appended after a
    torn or corrupt record. On any failure the file holds exactly the bytes it held before.
    """
    limits = limits or ReferenceHistoryLimits()
    record = _encode_record(message)
    fd, key = _open_for_appending(path)
    try:
        size = os.fstat(fd).st_size
        index = _catch_up(fd, key, size, limits)
        index.check_candidate(message)
        if index.messages + 1 > limits.max_messages:
            raise ReferenceHistoryLimitError(
                "too-many-messages", f"the history already holds {limits.max_messages} messages"
            )
        if size + len(record) > limits.max_file_bytes:
            raise ReferenceHistoryLimitError(
                "file-too-large", f"the record would take the file over {limits.max_file_bytes} bytes"
            )
        _write_durably(fd, key, size, record)
        index.admit(message)
        index.checked_bytes = size + len(record)
        index.extend_tail(record)
        _store_index(key, index)
        return AppendedRecord(message_id=message.id, line=index.messages + 1, offset=size, length=len(record))
    finally:
        os.close(fd)  # closing also releases the lock
