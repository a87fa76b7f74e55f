"""One Pi session file kept in view: re-read incrementally, projected to its model context and snapshot.

Both the runtime adapter and the ``/context`` workspace look at a session through a :class:`PiSessionView`,
so there is one place that decides when the file may be re-read from an offset and how a branch becomes a
``runtime-history-v1`` snapshot.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Collection
from operator import is_
from pathlib import Path
from typing import Final, NamedTuple

from ds4_context_core import RuntimeHistorySnapshot, stable_hash, stable_json
from ds4_context_core.history import build_runtime_history_snapshot

from ._context import PiContext, build_pi_context
from ._reader import (
    DEFAULT_MAX_PI_SESSION_BYTES,
    DEFAULT_MIN_PI_LINE_BYTES,
    PiEntry,
    PiSession,
    extend_pi_session,
    open_pi_session_file,
    read_capped,
    read_pi_session_bytes,
)

__all__ = ["PI_VIEW_3X_MIN_LINE_BYTES", "PiRevisionCache", "PiSessionView", "pi_session_revision"]

#: The ``min_line_bytes`` that keeps a view within 3x its file (``PiSessionView(path, min_line_bytes=...)``;
#: the default is the reader's 128). A view holds the file, an entry (~190 bytes) per line and, for each
#: message, its canonical form (~330 bytes besides its decoded text, which about repeats the line), so a
#: message line of ``n`` bytes costs about ``2n + 420`` and a session of lines averaging ``n`` bytes takes
#: ``2 + 420/n`` times its file: 2.66x at 642 (tool calls cost more objects a byte; the snapshot's tool
#: groups more for a moment). Not the default: long sessions of short steps (10,000 small edits) average
#: less and would be refused.
PI_VIEW_3X_MIN_LINE_BYTES: Final = 640


class _SessionRead(NamedTuple):
    """A parsed session and the file it came from: device, inode and the exact bytes of its header line."""

    session: PiSession
    device: int
    inode: int
    header_line: bytes


def _reload(path: Path, previous: _SessionRead | None, min_line_bytes: int) -> _SessionRead:
    """Read ``path`` again, parsing only the appended bytes while it is still the file of ``previous``.

    The file is opened once (a symlink or a non-regular file is refused, a FIFO without blocking) and
    everything is decided and read through that descriptor. The prefix read before is trusted only when
    the descriptor names the same file (device and inode), no shorter, with its header line bytes
    unchanged. Otherwise the whole file is read and checked exactly as :func:`read_pi_session` does.
    """
    with open_pi_session_file(path) as handle:
        info = os.fstat(handle.fileno())
        if previous is not None and (info.st_dev, info.st_ino) == (previous.device, previous.inode):
            end = previous.session.end_offset
            if info.st_size >= end and handle.read(len(previous.header_line)) == previous.header_line:
                if info.st_size == end:
                    return previous
                handle.seek(end)
                grown = extend_pi_session(previous.session, handle.read(), min_line_bytes=min_line_bytes)
                return previous._replace(session=grown)
            handle.seek(0)
        data = read_capped(handle, DEFAULT_MAX_PI_SESSION_BYTES)
    session = read_pi_session_bytes(data, path=str(path), min_line_bytes=min_line_bytes)
    # a parsed session has a complete header line
    return _SessionRead(session, info.st_dev, info.st_ino, data[: data.index(b"\n") + 1])


def pi_session_revision(session: PiSession, leaf_id: str | None) -> str:
    """sha256 of the stable JSON of ``{leafId, entries}`` (entries as decoded, in file order)."""
    return stable_hash({"leafId": leaf_id, "entries": [entry.data for entry in session.entries]})


class PiRevisionCache:
    """:func:`pi_session_revision` for a session that grows by appends, paying only for new entries.

    The stable JSON of ``{"entries": [...], "leafId": ...}`` is the concatenation of each entry's stable
    JSON (keys sort ``entries`` before ``leafId``), so the hash runs over the entries once: a revision
    finishes a copy of the running sha256 with the leaf. Nothing but the running hash and the entries
    tuple of the session hashed last (the session's own object, not a copy) is kept; a session that
    starts with the same entry objects (``extend_pi_session`` keeps them; a fresh read does not) pays
    for the entries after them only.
    """

    __slots__ = ("_entries", "_running")

    def __init__(self) -> None:
        self._entries: tuple[PiEntry, ...] = ()
        self._running = hashlib.sha256(b'{"entries":[')

    def revision(self, session: PiSession, leaf_id: str | None) -> str:
        known = len(self._entries)
        current = session.entries
        if current is not self._entries and (
            known > len(current) or not all(map(is_, self._entries, current))
        ):
            self._running = hashlib.sha256(b'{"entries":[')
            known = 0
        running = self._running
        for number in range(known, len(current)):
            if number:
                running.update(b",")
            running.update(stable_json(current[number].data).encode("utf-8"))
        self._entries = current
        digest = running.copy()
        digest.update(b'],"leafId":' + stable_json(leaf_id).encode("utf-8") + b"}")
        return digest.hexdigest()


class PiSessionView:
    """A session file read once, then re-read only for what was appended (see :meth:`refresh`).

    Nothing is read until the first :meth:`refresh` (or :attr:`session`). The view never writes the file.
    ``min_line_bytes`` is the reader's limit of the same name (:data:`PI_VIEW_3X_MIN_LINE_BYTES` keeps
    the view within 3x its file; 0 turns it off), applied to every read and append.
    """

    __slots__ = ("_min_line_bytes", "_path", "_read", "_revision", "_revisions")

    def __init__(
        self, path: str | os.PathLike[str], *, min_line_bytes: int = DEFAULT_MIN_PI_LINE_BYTES
    ) -> None:
        self._path = Path(path)
        self._min_line_bytes = min_line_bytes
        self._read: _SessionRead | None = None
        self._revisions = PiRevisionCache()
        # the last revision computed, for the session object and leaf it was computed for
        self._revision: tuple[PiSession, str | None, str] | None = None

    @property
    def path(self) -> Path:
        return self._path

    @property
    def session(self) -> PiSession:
        """The session as of the last :meth:`refresh` (the first use reads the file)."""
        if self._read is None:
            return self.refresh()
        return self._read.session

    def refresh(self) -> PiSession:
        """Read the file again: only the appended bytes while the path names the file read before.

        A new :class:`PiSession` object is returned exactly when something changed. Raises
        ``PiSessionError`` (with the reader's codes) when the file cannot be used.
        """
        self._read = _reload(self._path, self._read, self._min_line_bytes)
        return self._read.session

    def forget(self) -> None:
        """Drop what was read; the next use reads the file from its first byte."""
        self._read = None
        self._revision = None

    def context(self, leaf_id: str | None = None, *, pinned_entry_ids: Collection[str] = ()) -> PiContext:
        """The model context of the branch ending at ``leaf_id`` (default: the newest entry)."""
        return build_pi_context(self.session, leaf_id, pinned_entry_ids=pinned_entry_ids)

    def revision(self, leaf_id: str | None) -> str:
        """:func:`pi_session_revision` of the current session, paying only for entries not hashed yet."""
        session = self.session
        cached = self._revision
        if cached is not None and cached[0] is session and cached[1] == leaf_id:
            return cached[2]
        revision = self._revisions.revision(session, leaf_id)
        self._revision = (session, leaf_id, revision)
        return revision

    def snapshot(self, context: PiContext, *, runtime_id: str, project_root: str) -> RuntimeHistorySnapshot:
        """``context`` (of this view's session) as a ``runtime-history-v1`` snapshot; not validated here."""
        return build_runtime_history_snapshot(
            runtime_id=runtime_id,
            session_id=context.session_id,
            revision=self.revision(context.leaf_id),
            project_root=project_root,
            messages=context.messages,
        )
