"""Reading Pi session files (v1-v3) into an in-memory tree, without ever writing to them.

v1 files are a flat list without ids: each entry gets a deterministic 8-hex id derived from the session id
and its line number, and its predecessor as parent, so two reads of the same bytes give the same tree.
v2 files name the custom message role ``hookMessage``; it is renamed to ``custom`` in memory (v3).
Bad lines are reported as issues with codes and skipped; nothing is ever repaired on disk.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Container, Iterator
from pathlib import Path
from typing import Any, BinaryIO, Final, Literal

import msgspec

from ds4_context_engine._exceptions import PiSessionError

__all__ = [
    "DEFAULT_MAX_PI_SESSION_BYTES",
    "DEFAULT_MAX_PI_SESSION_ENTRIES",
    "DEFAULT_MIN_PI_LINE_BYTES",
    "KNOWN_PI_ENTRY_TYPES",
    "MAX_PI_ISSUES_PER_CODE",
    "MAX_PI_JSON_DEPTH",
    "PI_ISSUE_CODES",
    "PI_SESSION_SMALL_LINES",
    "PI_SESSION_VERSION",
    "PiEntry",
    "PiSession",
    "PiSessionHeader",
    "PiSessionIssue",
    "extend_pi_session",
    "read_pi_session",
    "read_pi_session_bytes",
]

PI_SESSION_VERSION: Final = 3
DEFAULT_MAX_PI_SESSION_BYTES: Final = 256 * 1024 * 1024
#: The most entries a session may have; a file with more is refused (``pi-session-too-many-entries``), so
#: memory stays bounded however small the entries are (about 0.5 KiB each for the tiniest).
DEFAULT_MAX_PI_SESSION_ENTRIES: Final = 1_000_000
#: Beyond its first :data:`PI_SESSION_SMALL_LINES` lines, a session file must average at least this many
#: bytes a line (``min_line_bytes=``; 0 turns it off), or it is refused (``pi-session-too-many-entries``)
#: before anything is decoded. An entry costs about 200-240 bytes of memory besides its line, so this keeps
#: every accepted file within 3x its size. Real Pi lines are longer: a session is mostly messages, and its
#: smallest entries (labels, setting changes) are 110-140 bytes with their ids and timestamp.
DEFAULT_MIN_PI_LINE_BYTES: Final = 128
#: Lines any session file may have whatever their size (about 2.5 MiB of memory beyond the file at most).
PI_SESSION_SMALL_LINES: Final = 10_000
#: Issues kept per issue code; later ones are only counted (``PiSession.issues_omitted``).
MAX_PI_ISSUES_PER_CODE: Final = 100
#: The deepest nesting of JSON arrays and objects a line may have (the entry object itself is level 1).
MAX_PI_JSON_DEPTH: Final = 64
KNOWN_PI_ENTRY_TYPES: Final = (
    "branch_summary",
    "compaction",
    "custom",
    "custom_message",
    "label",
    "message",
    "model_change",
    "session_info",
    "thinking_level_change",
)
PI_ISSUE_CODES: Final = (
    "pi-compaction-first-kept-missing",
    "pi-entry-id-duplicate",
    "pi-entry-invalid",
    "pi-entry-type-unknown",
    "pi-line-corrupt",
    "pi-line-partial",
    "pi-line-too-deep",
    "pi-message-field-invalid",
    "pi-message-role-unknown",
    "pi-parent-cycle",
    "pi-parent-dangling",
)

IssueSeverity = Literal["info", "warning", "error"]

_HEADER_KEYS: Final = frozenset({"type", "version", "id", "timestamp", "cwd", "parentSession"})

_decoder: Final = msgspec.json.Decoder()
_encoder: Final = msgspec.json.Encoder()
_TOO_DEEP: Final = object()
# one shared string per known entry type, instead of one decoded copy per entry
_ENTRY_TYPE_NAMES: Final = {name: name for name in KNOWN_PI_ENTRY_TYPES}


class PiSessionHeader(msgspec.Struct, frozen=True, kw_only=True):
    """The first line of a session file. ``extra`` keeps any other header field (v1 ``provider`` ...)."""

    version: int
    id: str
    timestamp: str
    cwd: str
    parent_session: str | None = None
    extra: dict[str, Any] = msgspec.field(default_factory=dict)


class _Source:
    """The bytes entries were read from: a whole file, or a tail appended to it, starting at file offset
    ``base``. Every entry of one read shares one source, so holding the entries holds the file once."""

    __slots__ = ("base", "data")

    def __init__(self, data: bytes, base: int) -> None:
        self.data = data
        self.base = base


# the source of entries kept for their tree shape only (``_shape``): their data is ``{}``
_EMPTY_SOURCE: Final = _Source(b"{}", 0)
_FIELD_BITS: Final = 40
_FIELD_MASK: Final = (1 << _FIELD_BITS) - 1


class PiEntry(msgspec.Struct, frozen=True, kw_only=True, gc=False, eq=False):
    """One tree entry: its ``type``, ``id`` and ``parent_id``, its ``line`` and first byte (``offset``).

    ``data`` is the decoded line (after in-memory migration). It is decoded from the file's bytes each time
    it is asked for and never kept, so a session holds its file once plus about 200 bytes per entry instead
    of every line decoded: bind it to a name when you need it more than once. ``timestamp`` is the
    entry's ``timestamp`` when it is a string, else ``""``. Entries compare equal when those fields do.

    Not tracked by the cycle collector (``gc=False``): an entry never refers back to itself, and millions
    of tracked entries made every collection walk them all.
    """

    type: str
    id: str
    parent_id: str | None
    _source: _Source
    # line << 40 | offset: one integer object instead of two, and a small one (32 bytes up to line 2**20,
    # where a third field, the length, made it 40): the line ends at the first newline from its offset,
    # or where its source ends (an entry not read from a file holds its line alone)
    _where: int

    @classmethod
    def from_data(
        cls, *, type: str, id: str, parent_id: str | None, line: int, offset: int, data: dict[str, Any]
    ) -> PiEntry:
        """An entry that is not backed by a file read: ``data`` is encoded once and decoded on access."""
        if not data:  # a tree shape only: nothing to hold
            return cls(
                type=type, id=id, parent_id=parent_id, _source=_EMPTY_SOURCE, _where=_pack(line, offset)
            )
        encoded = _encoder.encode(data)
        return cls(
            type=type,
            id=id,
            parent_id=parent_id,
            _source=_Source(encoded, offset),
            _where=_pack(line, offset),
        )

    @property
    def line(self) -> int:
        return self._where >> _FIELD_BITS

    @property
    def offset(self) -> int:
        return self._where & _FIELD_MASK

    @property
    def data(self) -> dict[str, Any]:
        source = self._source
        if source is _EMPTY_SOURCE:
            return {}
        data = source.data
        start = (self._where & _FIELD_MASK) - source.base
        end = data.find(b"\n", start)
        value: dict[str, Any] = _decoder.decode(memoryview(data)[start : end if end >= 0 else len(data)])
        return value

    @property
    def timestamp(self) -> str:
        timestamp = self.data.get("timestamp")
        return timestamp if isinstance(timestamp, str) else ""

    def _key(self) -> tuple[str, str, str | None, int, int]:
        return (self.type, self.id, self.parent_id, self.line, self.offset)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PiEntry):
            return NotImplemented
        return self is other or (self._key() == other._key() and self.data == other.data)

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (
            f"PiEntry(type={self.type!r}, id={self.id!r}, parent_id={self.parent_id!r},"
            f" line={self.line}, offset={self.offset})"
        )

    def __rich_repr__(self) -> list[tuple[str, Any]]:
        return [
            ("type", self.type),
            ("id", self.id),
            ("parent_id", self.parent_id),
            ("line", self.line),
            ("offset", self.offset),
        ]


def _pack(line: int, offset: int) -> int:
    if offset > _FIELD_MASK:
        raise PiSessionError("pi-session-too-large", "a session offset exceeds 2**40 bytes")
    return (line << _FIELD_BITS) | offset


def entry_from_line(
    entry_type: str, entry_id: str, parent_id: str | None, *, line: int, offset: int, text: bytes
) -> PiEntry:
    """The entry a reader would make of ``text``, the line (without newline) at ``offset`` of a file."""
    return PiEntry(
        type=_ENTRY_TYPE_NAMES.get(entry_type, entry_type),
        id=entry_id,
        parent_id=parent_id,
        _source=_Source(text, offset),
        _where=_pack(line, offset),
    )


def entry_shape(entry: PiEntry) -> PiEntry:
    """``entry`` without its data (``{}``) and without holding the bytes it was read from."""
    if entry._source is _EMPTY_SOURCE:
        return entry
    return PiEntry.from_data(
        type=entry.type, id=entry.id, parent_id=entry.parent_id, line=entry.line, offset=entry.offset, data={}
    )


class PiSessionIssue(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Something wrong or unusual in the file. Never carries entry content."""

    code: str
    severity: IssueSeverity
    message: str
    line: int | None = None
    entry_id: str | None = None


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether decoded JSON nests arrays and objects more than ``limit`` levels (without recursing)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def _decode_line(text: bytes) -> Any:
    """The decoded line; ``_TOO_DEEP`` when it nests deeper than :data:`MAX_PI_JSON_DEPTH`.

    Raises ``msgspec.DecodeError`` for a line that is not JSON. Only a line with more opening brackets
    than the limit (strings included, a cheap count) is walked for its real depth.
    """
    try:
        value = _decoder.decode(text)
    except RecursionError:  # deeper than the interpreter's own limit: far beyond ours
        return _TOO_DEEP
    if (
        isinstance(value, dict | list)
        and text.count(b"[") + text.count(b"{") > MAX_PI_JSON_DEPTH
        and _deeper_than(value, MAX_PI_JSON_DEPTH)
    ):
        return _TOO_DEEP
    return value


def _v1_entry_id(session_id: str, line: int, taken: Container[str]) -> str:
    salt = 0
    while True:
        digest = hashlib.sha256(f"{session_id}\n{line}\n{salt}".encode()).hexdigest()[:8]
        if digest not in taken:
            return digest
        salt += 1


def _parse_header(raw: Any, path: str) -> PiSessionHeader:
    if not isinstance(raw, dict) or raw.get("type") != "session":
        raise PiSessionError("pi-session-header-missing", f"{path}: the first line is not a session header")
    version = raw.get("version", 1)
    session_id = raw.get("id")
    cwd = raw.get("cwd")
    if type(version) is not int or version < 1:
        raise PiSessionError(
            "pi-session-header-invalid", f"{path}: the header version is not an integer >= 1"
        )
    if version > PI_SESSION_VERSION:
        raise PiSessionError(
            "pi-session-version-unsupported",
            f"{path}: session version {version} is newer than the supported {PI_SESSION_VERSION}",
        )
    if not isinstance(session_id, str) or not session_id or not isinstance(cwd, str) or not cwd:
        raise PiSessionError("pi-session-header-invalid", f"{path}: the header needs a string id and cwd")
    parent = raw.get("parentSession", raw.get("branchedFrom"))
    timestamp = raw.get("timestamp")
    return PiSessionHeader(
        version=version,
        id=session_id,
        timestamp=timestamp if isinstance(timestamp, str) else "",
        cwd=cwd,
        parent_session=parent if isinstance(parent, str) else None,
        extra={key: value for key, value in raw.items() if key not in _HEADER_KEYS},
    )


def _lines(data: bytes, start: int) -> Iterator[tuple[int, bytes, bool]]:
    """(offset, line bytes without newline, terminated) for every line from ``start``."""
    position = start
    size = len(data)
    while position < size:
        end = data.find(b"\n", position)
        if end < 0:
            yield position, data[position:], False
            return
        yield position, data[position:end], True
        position = end + 1


class _Scan:
    """Mutable state of one pass over the lines of a file."""

    def __init__(
        self,
        header: PiSessionHeader,
        known: dict[str, PiEntry],
        first_line: int,
        *,
        max_entries: int = DEFAULT_MAX_PI_SESSION_ENTRIES,
        issues: tuple[PiSessionIssue, ...] = (),
        issues_omitted: int = 0,
    ) -> None:
        self.header = header
        self.entries: list[PiEntry] = []
        self.issues: list[PiSessionIssue] = list(issues)
        self.issues_omitted = issues_omitted
        self.per_code: dict[str, int] = {}
        for earlier in issues:
            self.per_code[earlier.code] = self.per_code.get(earlier.code, 0) + 1
        # every entry by id, the ones known before this pass included: also the session's lookup table
        self.by_id = known
        self.max_entries = max_entries
        self.line = first_line
        self.previous_id: str | None = None
        self.end_offset = 0
        self.end_line = first_line
        # v1 compactions name the first kept entry by index into the entry list
        self.v1_index_to_id: list[str] = []

    def issue(self, code: str, severity: IssueSeverity, message: str, *, entry_id: str | None = None) -> None:
        count = self.per_code.get(code, 0)
        self.per_code[code] = count + 1
        if count >= MAX_PI_ISSUES_PER_CODE:
            self.issues_omitted += 1
            return
        self.issues.append(
            PiSessionIssue(code=code, severity=severity, message=message, line=self.line, entry_id=entry_id)
        )


def _migrate(raw: dict[str, Any], scan: _Scan) -> bool:
    """Migrate a v1 or v2 line to v3 in place; whether anything changed."""
    version = scan.header.version
    changed = False
    if version < 3 and raw.get("type") == "message":
        message = raw.get("message")
        if isinstance(message, dict) and message.get("role") == "hookMessage":
            raw["message"] = {**message, "role": "custom"}
            changed = True
    if version == 1:
        if isinstance(raw.get("id"), str) and "parentId" in raw:
            # appended by a tree-aware writer after the v1 lines: already migrated
            scan.v1_index_to_id.append(raw["id"])
            return changed
        entry_id = _v1_entry_id(scan.header.id, scan.line, scan.by_id)
        raw["id"] = entry_id
        raw["parentId"] = scan.previous_id
        index = raw.get("firstKeptEntryIndex")
        if (
            raw.get("type") == "compaction"
            and "firstKeptEntryId" not in raw
            and type(index) is int
            and 0 <= index < len(scan.v1_index_to_id)
        ):
            raw["firstKeptEntryId"] = scan.v1_index_to_id[index]
        scan.v1_index_to_id.append(entry_id)
        return True
    return changed


def _check_density(lines: int, size: int, min_line_bytes: int, path: str) -> None:
    """Refuse a file of ``lines`` lines in ``size`` bytes whose lines are too short to hold in 3x its size."""
    if min_line_bytes > 0 and lines > max(PI_SESSION_SMALL_LINES, size // min_line_bytes):
        raise PiSessionError(
            "pi-session-too-many-entries",
            f"{path}: {lines} lines in {size} bytes; past the first {PI_SESSION_SMALL_LINES}, lines must"
            f" average at least {min_line_bytes} bytes",
        )


def _scan_lines(data: bytes, start: int, scan: _Scan, *, base_offset: int = 0) -> None:
    source = _Source(data, base_offset)
    scan.end_offset = base_offset + start
    scan.end_line = scan.line
    for relative, text, terminated in _lines(data, start):
        offset = base_offset + relative
        scan.line += 1
        if not terminated:
            # A torn tail is a write in progress or a crash; it is not ours to repair.
            scan.issue("pi-line-partial", "warning", "the last line has no newline and was not read")
            return
        scan.end_offset = offset + len(text) + 1
        scan.end_line = scan.line
        if not text.strip():
            continue
        try:
            raw = _decode_line(text)
        except msgspec.DecodeError:
            scan.issue("pi-line-corrupt", "error", "the line is not valid JSON and was skipped")
            continue
        if raw is _TOO_DEEP:
            scan.issue(
                "pi-line-too-deep",
                "error",
                f"the line nests deeper than {MAX_PI_JSON_DEPTH} levels and was skipped",
            )
            continue
        if not isinstance(raw, dict):
            scan.issue("pi-line-corrupt", "error", "the line is not a JSON object and was skipped")
            continue
        migrated = _migrate(raw, scan) if scan.header.version < PI_SESSION_VERSION else False
        entry_type = raw.get("type")
        entry_id = raw.get("id")
        parent_id = raw.get("parentId")
        if not isinstance(entry_type, str) or not isinstance(entry_id, str) or not entry_id:
            scan.issue("pi-entry-invalid", "error", "the entry has no string type or id and was skipped")
            continue
        if parent_id is not None and not isinstance(parent_id, str):
            scan.issue("pi-entry-invalid", "error", "the entry parentId is not a string", entry_id=entry_id)
            continue
        if entry_id in scan.by_id:
            scan.issue("pi-entry-id-duplicate", "error", "a second entry reuses an id and was skipped")
            continue
        if entry_type not in KNOWN_PI_ENTRY_TYPES:
            scan.issue(
                "pi-entry-type-unknown",
                "warning",
                "an entry of an unknown type is kept in the tree but not sent to the model",
                entry_id=entry_id,
            )
        if len(scan.by_id) >= scan.max_entries:
            raise PiSessionError(
                "pi-session-too-many-entries", f"the session has more than {scan.max_entries} entries"
            )
        parent = scan.by_id.get(parent_id) if parent_id is not None else None
        if parent is not None:  # share the parent's id string instead of keeping a decoded copy
            parent_id = parent.id
        scan.previous_id = entry_id
        if migrated:  # what the entry reads as is not what the file holds: keep the migrated line
            entry = PiEntry.from_data(
                type=_ENTRY_TYPE_NAMES.get(entry_type, entry_type),
                id=entry_id,
                parent_id=parent_id,
                line=scan.line,
                offset=offset,
                data=raw,
            )
        else:
            entry = PiEntry(
                type=_ENTRY_TYPE_NAMES.get(entry_type, entry_type),
                id=entry_id,
                parent_id=parent_id,
                _source=source,
                _where=_pack(scan.line, offset),
            )
        scan.by_id[entry_id] = entry
        scan.entries.append(entry)


class PiSession:
    """A parsed session file: header, entries in file order, issues, and tree navigation.

    The file is read once; the object never touches it again. ``end_offset`` is the byte just past the
    last complete line, where incremental indexing resumes. ``issues`` keeps the first
    :data:`MAX_PI_ISSUES_PER_CODE` issues of each code; ``issues_omitted`` counts the ones not kept.
    """

    __slots__ = (
        "_by_id",
        "context_memo",
        "end_line",
        "end_offset",
        "entries",
        "header",
        "issues",
        "issues_omitted",
        "path",
        "source_version",
    )

    def __init__(
        self,
        *,
        path: str,
        header: PiSessionHeader,
        entries: tuple[PiEntry, ...],
        issues: tuple[PiSessionIssue, ...],
        end_offset: int,
        end_line: int,
        issues_omitted: int = 0,
    ) -> None:
        self.path = path
        self.header = header
        self.source_version = header.version
        self.entries = entries
        self.issues = issues
        self.issues_omitted = issues_omitted
        self.end_offset = end_offset
        self.end_line = end_line
        self._by_id = {entry.id: entry for entry in entries}
        # What each entry became in a model context (see ``build_pi_context``), shared by the sessions
        # an append grows from this one, which hold the very same entry objects.
        self.context_memo: dict[object, Any] = {}

    @classmethod
    def _from_scan(cls, path: str, scan: _Scan, entries: tuple[PiEntry, ...]) -> PiSession:
        """The session a scan produced, reusing the scan's id table instead of building a second one."""
        session = cls.__new__(cls)
        session.path = path
        session.header = scan.header
        session.source_version = scan.header.version
        session.entries = entries
        session.issues = tuple(scan.issues)
        session.issues_omitted = scan.issues_omitted
        session.end_offset = scan.end_offset
        session.end_line = scan.end_line
        session._by_id = scan.by_id
        session.context_memo = {}
        return session

    @property
    def session_id(self) -> str:
        return self.header.id

    @property
    def leaf_id(self) -> str | None:
        """The newest entry: the one appended last."""
        return self.entries[-1].id if self.entries else None

    def entry(self, entry_id: str) -> PiEntry | None:
        return self._by_id.get(entry_id)

    def labels(self) -> dict[str, str]:
        """Current label per target entry id; a later label entry replaces or (when empty) clears one."""
        labels: dict[str, str] = {}
        for entry in self.entries:
            if entry.type != "label":
                continue
            data = entry.data  # decoded once
            target = data.get("targetId")
            label = data.get("label")
            if not isinstance(target, str):
                continue
            if isinstance(label, str) and label.strip():
                labels[target] = label
            else:
                labels.pop(target, None)
        return labels

    def branch(self, leaf_id: str | None = None) -> tuple[tuple[PiEntry, ...], tuple[PiSessionIssue, ...]]:
        """Entries from the root to ``leaf_id`` (default: the newest entry) and what went wrong on the way.

        A dangling parent id ends the walk there (that entry acts as the root); a cycle ends it at the
        first repeated entry. Both are reported, neither is guessed around.
        """
        start = leaf_id if leaf_id is not None else self.leaf_id
        if start is None:
            return (), ()
        if start not in self._by_id:
            raise PiSessionError("pi-leaf-unknown", "the requested leaf id is not an entry of this session")
        by_id = self._by_id
        path: list[PiEntry] = []
        issues: list[PiSessionIssue] = []
        # No set of the ids seen: a walk longer than the session has repeated an entry, and only then is
        # it walked again to find where (a set of every id on the branch cost ~40 bytes an entry).
        longest = len(by_id)
        current: str | None = start
        while current is not None:
            entry = by_id.get(current)
            if entry is None:
                issues.append(
                    PiSessionIssue(
                        code="pi-parent-dangling",
                        severity="error",
                        message="an entry names a parent that does not exist; the branch starts after it",
                        line=path[-1].line,
                        entry_id=path[-1].id,
                    )
                )
                break
            if len(path) == longest:
                path, repeated = self._cut_at_cycle(start)
                issues.append(
                    PiSessionIssue(
                        code="pi-parent-cycle",
                        severity="error",
                        message="parent ids form a cycle; the branch was cut where it repeats",
                        line=repeated.line,
                        entry_id=repeated.id,
                    )
                )
                break
            path.append(entry)
            current = entry.parent_id
        path.reverse()
        return tuple(path), tuple(issues)

    def _cut_at_cycle(self, start: str) -> tuple[list[PiEntry], PiEntry]:
        """The walk from ``start`` up to (not including) the first entry met twice, and that entry."""
        path: list[PiEntry] = []
        seen: set[str] = set()
        entry = self._by_id[start]
        while entry.id not in seen:
            seen.add(entry.id)
            path.append(entry)
            # the caller walked past every entry: each parent exists
            entry = self._by_id[entry.parent_id]  # type: ignore[index]
        return path, entry

    def children(self) -> dict[str | None, list[str]]:
        """Child ids per parent id (``None`` for roots), in file order."""
        result: dict[str | None, list[str]] = {}
        for entry in self.entries:
            result.setdefault(entry.parent_id, []).append(entry.id)
        return result

    def leaves(self) -> tuple[str, ...]:
        """Ids of entries no other entry names as parent, in file order: the tips of every branch."""
        parents = {entry.parent_id for entry in self.entries}
        return tuple(entry.id for entry in self.entries if entry.id not in parents)


def memo_mark(session: PiSession) -> tuple[int, PiEntry | None]:
    """How many entries ``session`` holds and the last of them: what :func:`seen_by` checks a memo item by."""
    entries = session.entries
    return len(entries), entries[-1] if entries else None


def seen_by(session: PiSession, count: int, last: PiEntry | None) -> bool:
    """Whether ``session`` starts with the ``count`` entries something in its memo was made from, the last
    of them ``last`` (``None`` for none).

    The memo is shared by every session grown from one session, including two grown from the same one by
    different appends, so a count alone may name another session's entries. An entry object is appended
    after exactly one prefix (``extend_pi_session`` keeps the entries before it), so the same object at
    that place means the same entries before it.
    """
    entries = session.entries
    if count > len(entries):
        return False
    return last is None if count == 0 else entries[count - 1] is last


def read_pi_session_bytes(
    data: bytes,
    *,
    path: str = "<memory>",
    max_bytes: int = DEFAULT_MAX_PI_SESSION_BYTES,
    max_entries: int = DEFAULT_MAX_PI_SESSION_ENTRIES,
    min_line_bytes: int = DEFAULT_MIN_PI_LINE_BYTES,
) -> PiSession:
    """Parse session bytes. Raises ``PiSessionError`` when there is no usable header, or on the limits.

    More than ``max_bytes`` is ``pi-session-too-large``; more than ``max_entries`` entries, or (past the
    first :data:`PI_SESSION_SMALL_LINES`) lines averaging under ``min_line_bytes`` bytes, is
    ``pi-session-too-many-entries``; every other problem is an issue of the session. The session keeps
    ``data`` (its entries decode their lines from it on access).
    """
    if len(data) > max_bytes:
        raise PiSessionError("pi-session-too-large", f"{path}: the file exceeds {max_bytes} bytes")
    if type(data) is not bytes:  # the entries keep the bytes: never a buffer the caller may change
        data = bytes(data)
    first_end = data.find(b"\n")
    if first_end < 0:
        raise PiSessionError("pi-session-header-missing", f"{path}: there is no complete header line")
    try:
        raw_header = _decode_line(data[:first_end])
    except msgspec.DecodeError as error:
        raise PiSessionError("pi-session-header-invalid", f"{path}: the header is not valid JSON") from error
    if raw_header is _TOO_DEEP:
        raise PiSessionError(
            "pi-session-header-invalid", f"{path}: the header nests deeper than {MAX_PI_JSON_DEPTH} levels"
        )
    header = _parse_header(raw_header, path)
    _check_density(data.count(b"\n"), len(data), min_line_bytes, path)
    scan = _Scan(header, {}, first_line=1, max_entries=max_entries)
    _scan_lines(data, first_end + 1, scan)
    return PiSession._from_scan(path, scan, tuple(scan.entries))


# O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever
_OPEN_FLAGS: Final = (
    os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
)


def open_pi_session_file(path: Path, max_bytes: int = DEFAULT_MAX_PI_SESSION_BYTES) -> BinaryIO:
    """``path`` opened for reading, if it is a regular file of at most ``max_bytes``.

    A symlink, FIFO, socket, device or directory is refused without blocking. Raises ``PiSessionError``:
    ``pi-session-not-found``, ``pi-session-unreadable`` (with why) or ``pi-session-too-large``.
    """
    try:
        descriptor = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError as error:
        raise PiSessionError("pi-session-not-found", f"{path}: no such session file") from error
    except OSError as error:
        raise PiSessionError("pi-session-unreadable", f"{path}: cannot open ({error.strerror})") from error
    except ValueError:  # a NUL character: no such path can exist
        raise PiSessionError("pi-session-unreadable", "the session path contains a NUL character") from None
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise PiSessionError(
                "pi-session-unreadable", f"{path}: not a regular file (a directory, FIFO, socket or device)"
            )
        if info.st_size > max_bytes:
            raise PiSessionError("pi-session-too-large", f"{path}: the file exceeds {max_bytes} bytes")
        os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def read_capped(handle: BinaryIO, max_bytes: int) -> bytes:
    """The rest of ``handle`` (a regular file, at most ``max_bytes`` and one byte more when larger).

    Asks for the size fstat sees (plus one byte, to see a file that grew past the cap), not for
    ``max_bytes``: a read of n bytes allocates n first, 256 MiB for every small session.
    """
    expected = max(0, os.fstat(handle.fileno()).st_size - handle.tell())
    data = handle.read(min(expected, max_bytes) + 1)
    if len(data) > expected and len(data) <= max_bytes:  # grew while being read: take the rest too
        data += handle.read(max_bytes + 1 - len(data))
    return data


def _read_regular_file(path: Path, max_bytes: int) -> bytes:
    with open_pi_session_file(path, max_bytes) as handle:
        return read_capped(handle, max_bytes)


def read_pi_session(
    path: str | os.PathLike[str],
    *,
    max_bytes: int = DEFAULT_MAX_PI_SESSION_BYTES,
    max_entries: int = DEFAULT_MAX_PI_SESSION_ENTRIES,
    min_line_bytes: int = DEFAULT_MIN_PI_LINE_BYTES,
) -> PiSession:
    """Read a session file (a symlink as the file itself is refused). The file is never written.

    The limits are those of :func:`read_pi_session_bytes`.
    """
    file_path = Path(path)
    return read_pi_session_bytes(
        _read_regular_file(file_path, max_bytes),
        path=str(file_path),
        max_bytes=max_bytes,
        max_entries=max_entries,
        min_line_bytes=min_line_bytes,
    )


def extend_pi_session(
    session: PiSession,
    tail: bytes,
    *,
    max_entries: int = DEFAULT_MAX_PI_SESSION_ENTRIES,
    min_line_bytes: int = DEFAULT_MIN_PI_LINE_BYTES,
) -> PiSession:
    """The session grown by ``tail``: the bytes of the same file from ``session.end_offset`` onwards.

    Only the new complete lines are parsed, so re-reading after an append costs what was appended.
    Ids already in ``session`` count as taken, so a duplicate appended later is still reported.
    """
    if type(tail) is not bytes:  # the entries keep the bytes: never a buffer the caller may change
        tail = bytes(tail)
    _check_density(
        session.end_line + tail.count(b"\n"), session.end_offset + len(tail), min_line_bytes, session.path
    )
    # a torn tail reported before is either complete now or reported again by this scan
    earlier = tuple(issue for issue in session.issues if issue.code != "pi-line-partial")
    scan = _Scan(
        session.header,
        dict(session._by_id),
        first_line=session.end_line,
        max_entries=max_entries,
        issues=earlier,
        issues_omitted=session.issues_omitted,
    )
    scan.previous_id = session.leaf_id
    if session.header.version == 1:
        scan.v1_index_to_id = [entry.id for entry in session.entries]
    _scan_lines(tail, 0, scan, base_offset=session.end_offset)
    if not tail:
        return session
    grown = PiSession._from_scan(session.path, scan, session.entries + tuple(scan.entries))
    grown.context_memo = session.context_memo  # same entry objects: what they became still holds
    return grown
