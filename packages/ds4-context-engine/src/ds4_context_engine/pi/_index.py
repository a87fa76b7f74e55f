"""What a derived store indexes of a Pi session, read from the file incrementally by byte offset.

A store never parses Pi entries itself: it keeps a :class:`PiIndexCursor` per session file and asks
:class:`PiSessionIndexer` for the next :class:`PiIndexBatch`, whose :class:`PiIndexRecord` items carry
the searchable text, whether that text is a tool output, and the pin or memory event an entry holds.
Any backend (SQLite, PostgreSQL ...) persists the same records.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Final, Literal

import msgspec

from ._custom import pi_custom_entry
from ._reader import (
    PiEntry,
    PiSession,
    PiSessionHeader,
    entry_shape,
    extend_pi_session,
    open_pi_session_file,
    read_pi_session_bytes,
)

__all__ = [
    "MEMORY_CUSTOM_TYPE",
    "PIN_CUSTOM_TYPE",
    "UNPIN_CUSTOM_TYPE",
    "PiEntryShape",
    "PiIndexBatch",
    "PiIndexCursor",
    "PiIndexEvent",
    "PiIndexRecord",
    "PiSessionIndexer",
    "pi_index_event",
    "pi_index_record",
    "pi_is_tool_output",
]

PIN_CUSTOM_TYPE: Final = "ds4-context.pin"
UNPIN_CUSTOM_TYPE: Final = "ds4-context.unpin"
MEMORY_CUSTOM_TYPE: Final = "ds4-context.memory"
# the bytes before the indexed offset whose hash tells an append from a replaced file
_TAIL_HASH_BYTES: Final = 256
_HEADER_LINE_LIMIT: Final = 64 * 1024
_TOOL_OUTPUT_ROLES: Final = frozenset({"toolResult", "bashExecution"})


class PiEntryShape(msgspec.Struct, frozen=True, kw_only=True):
    """Where an entry sits in the tree and the file: all a store must keep to resume reading after it."""

    entry_id: str
    parent_id: str | None
    type: str
    line: int
    offset: int


class PiIndexEvent(msgspec.Struct, frozen=True, kw_only=True):
    """A pin, unpin or memory change recorded in the session (a ``custom`` entry of ours).

    ``target`` is the pinned entry id for ``pin``/``unpin`` and the item id for ``memory-*``.
    """

    kind: Literal["pin", "unpin", "memory-add", "memory-remove"]
    target: str
    label: str | None = None
    text: str | None = None


class PiIndexRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One entry as a store indexes it. ``text`` is what full-text search sees (may be empty)."""

    shape: PiEntryShape
    role: str | None
    text: str
    tool_output: bool
    event: PiIndexEvent | None


class PiIndexCursor(msgspec.Struct, frozen=True, kw_only=True):
    """How far a store has indexed one session file, and the hashes that prove it was appended to since.

    ``offset`` is the byte just past the last complete line indexed, ``line`` its line number;
    ``header_hash`` and ``tail_hash`` are sha256 (hex) of the header line and of the bytes before ``offset``.
    """

    session_id: str
    version: int
    cwd: str
    header_hash: str
    offset: int
    line: int
    tail_hash: str


class PiIndexBatch(msgspec.Struct, frozen=True, kw_only=True):
    """What to store after one read: the new cursor and the records of the entries read.

    ``mode="full"`` means everything stored for the session must be replaced by ``records``;
    ``incremental`` appends them; ``unchanged`` has none. ``issues`` counts the reader's issues.
    """

    mode: Literal["incremental", "full", "unchanged"]
    reason: str
    path: str
    cursor: PiIndexCursor
    records: tuple[PiIndexRecord, ...]
    issues: int


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _content_text(content: Any, parts: list[str], *, tool_calls: bool) -> None:
    if isinstance(content, str):
        parts.append(content)
        return
    if not isinstance(content, list):
        return
    for block in content:
        if not isinstance(block, dict):
            continue
        if isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif tool_calls and block.get("type") == "toolCall":
            parts.append(f"{block.get('name', '')} {msgspec.json.encode(block.get('arguments')).decode()}")


def pi_index_event(entry: PiEntry) -> PiIndexEvent | None:
    """The pin or memory event ``entry`` records, if it is one of ours and well formed."""
    custom = pi_custom_entry(entry)
    if custom is None or not isinstance(custom.value, dict):
        return None
    kind, data = custom.custom_type, custom.value
    target = data.get("entryId")
    item_id = data.get("itemId")
    if kind == PIN_CUSTOM_TYPE and isinstance(target, str):
        label = data.get("label")
        return PiIndexEvent(kind="pin", target=target, label=label if isinstance(label, str) else None)
    if kind == UNPIN_CUSTOM_TYPE and isinstance(target, str):
        return PiIndexEvent(kind="unpin", target=target)
    if kind == MEMORY_CUSTOM_TYPE and isinstance(item_id, str):
        if data.get("op") == "remove":
            return PiIndexEvent(kind="memory-remove", target=item_id)
        text = data.get("text")
        if isinstance(text, str):
            return PiIndexEvent(kind="memory-add", target=item_id, text=text)
    return None


def _message_role(entry: PiEntry) -> str | None:
    message = entry.data.get("message") if entry.type == "message" else None
    role = message.get("role") if isinstance(message, dict) else None
    return role if isinstance(role, str) else None


def pi_is_tool_output(entry: PiEntry) -> bool:
    """Whether ``entry`` is a tool's output (a tool result or a bash run): what a store may keep apart."""
    return _message_role(entry) in _TOOL_OUTPUT_ROLES


def pi_index_record(entry: PiEntry) -> PiIndexRecord:
    """The searchable text, role and event of one entry."""
    data = entry.data
    parts: list[str] = []
    role: str | None = None
    if entry.type == "message" and isinstance(data.get("message"), dict):
        message = data["message"]
        role = message.get("role") if isinstance(message.get("role"), str) else None
        _content_text(message.get("content"), parts, tool_calls=True)
        for key in ("command", "output", "summary"):
            if isinstance(message.get(key), str):
                parts.append(message[key])
    elif entry.type in ("compaction", "branch_summary") and isinstance(data.get("summary"), str):
        parts.append(data["summary"])
    elif entry.type == "custom_message":
        _content_text(data.get("content"), parts, tool_calls=False)
    return PiIndexRecord(
        shape=PiEntryShape(
            entry_id=entry.id,
            parent_id=entry.parent_id,
            type=entry.type,
            line=entry.line,
            offset=entry.offset,
        ),
        role=role,
        text="\n".join(parts),
        tool_output=role in _TOOL_OUTPUT_ROLES,
        event=pi_index_event(entry),
    )


def _shape_of(session: PiSession) -> PiSession:
    """The session without entry contents: enough to parse appended lines (ids, parents, lines)."""
    entries = tuple(map(entry_shape, session.entries))
    return PiSession(
        path=session.path,
        header=session.header,
        entries=entries,
        issues=(),
        end_offset=session.end_offset,
        end_line=session.end_line,
    )


def _stub_session(path: str, cursor: PiIndexCursor, shapes: Iterable[PiEntryShape]) -> PiSession:
    """A session holding only the tree shape a store kept, enough to parse appended lines in context."""
    entries = tuple(
        PiEntry.from_data(
            type=shape.type,
            id=shape.entry_id,
            parent_id=shape.parent_id,
            line=shape.line,
            offset=shape.offset,
            data={},
        )
        for shape in sorted(shapes, key=lambda shape: shape.line)
    )
    header = PiSessionHeader(version=cursor.version, id=cursor.session_id, timestamp="", cwd=cursor.cwd)
    return PiSession(
        path=path, header=header, entries=entries, issues=(), end_offset=cursor.offset, end_line=cursor.line
    )


def _cursor(session: PiSession, header_line: bytes, before_end: bytes) -> PiIndexCursor:
    return PiIndexCursor(
        session_id=session.session_id,
        version=session.header.version,
        cwd=session.header.cwd,
        header_hash=_sha256(header_line),
        offset=session.end_offset,
        line=session.end_line,
        tail_hash=_sha256(before_end[-_TAIL_HASH_BYTES:] if before_end else b""),
    )


class PiSessionIndexer:
    """Reads session files for a store, from the store's cursor on.

    The tree shape of each session read in this process is kept, so indexing an append costs what was
    appended; without it (another process indexed, or after :meth:`forget`) the shape comes from the
    store's own entry rows (``known_shapes``).
    """

    __slots__ = ("_shapes",)

    def __init__(self) -> None:
        self._shapes: dict[str, PiSession] = {}

    def forget(self) -> None:
        self._shapes.clear()

    def read(
        self,
        path: str | os.PathLike[str],
        cursor: PiIndexCursor | None,
        known_shapes: Callable[[], Sequence[PiEntryShape]],
        *,
        reason: str | None = None,
    ) -> PiIndexBatch:
        """The batch that brings a store at ``cursor`` (``None``: never indexed) up to the file's end.

        Reads only the bytes after ``cursor.offset`` when the header line and the bytes just before the
        offset are unchanged; otherwise (or with ``reason``, to force it) the whole file, as ``full``.
        A symlink or a non-regular file is refused (``PiSessionError``, the reader's codes); the file is
        never written.
        """
        file_path = Path(path)
        with open_pi_session_file(file_path) as handle:
            resolved = str(file_path.resolve())
            size = os.fstat(handle.fileno()).st_size
            if cursor is not None and reason is None:
                header_line = handle.readline(_HEADER_LINE_LIMIT)
                start = max(0, cursor.offset - _TAIL_HASH_BYTES)
                handle.seek(start)
                before = handle.read(cursor.offset - start)
                if (
                    size >= cursor.offset
                    and _sha256(header_line) == cursor.header_hash
                    and _sha256(before) == cursor.tail_hash
                ):
                    return self._incremental(resolved, cursor, before, handle.read(), known_shapes)
                reason = "the file changed before the indexed offset"
            handle.seek(0)
            data = handle.read()
        session = read_pi_session_bytes(data, path=resolved)
        self._shapes[session.session_id] = _shape_of(session)
        return PiIndexBatch(
            mode="full",
            reason=reason or "first index of this file",
            path=resolved,
            cursor=_cursor(session, data[: data.find(b"\n") + 1], data[: session.end_offset]),
            records=tuple(pi_index_record(entry) for entry in session.entries),
            issues=len(session.issues),
        )

    def _incremental(
        self,
        path: str,
        cursor: PiIndexCursor,
        before: bytes,
        tail: bytes,
        known_shapes: Callable[[], Sequence[PiEntryShape]],
    ) -> PiIndexBatch:
        if not tail:
            return PiIndexBatch(mode="unchanged", reason="", path=path, cursor=cursor, records=(), issues=0)
        stub = self._shapes.get(cursor.session_id)
        if stub is None or (stub.end_offset, stub.end_line, stub.path) != (cursor.offset, cursor.line, path):
            stub = _stub_session(path, cursor, known_shapes())
        grown = extend_pi_session(stub, tail)
        new_entries = grown.entries[len(stub.entries) :]
        self._shapes[cursor.session_id] = _shape_of(grown)
        before_end = before + tail[: grown.end_offset - cursor.offset]
        return PiIndexBatch(
            mode="incremental",
            reason="",
            path=path,
            cursor=msgspec.structs.replace(
                _cursor(grown, b"", before_end), header_hash=cursor.header_hash, version=cursor.version
            ),
            records=tuple(pi_index_record(entry) for entry in new_entries),
            issues=len(grown.issues),
        )
