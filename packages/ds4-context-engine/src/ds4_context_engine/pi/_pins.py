"""The pins a Pi session records (``ds4-context.pin`` / ``ds4-context.unpin`` custom entries), replayed.

The adapter's snapshot marks pinned messages with them, as the CLI's workspace does. The replay reads
only what was appended since the last call: a session grows by appends, and its reader keeps the entry
objects already read, so a prefix whose last entry is the same object is the same prefix.
"""

from __future__ import annotations

from ._index import pi_index_event
from ._reader import PiEntry, PiSession

__all__ = ["PinReplay"]


class PinReplay:
    """Pinned entry ids of a session, kept up to date one append at a time."""

    __slots__ = ("_last", "_pinned", "_seen", "_session_id")

    def __init__(self) -> None:
        self._session_id: str | None = None
        self._seen = 0
        self._last: PiEntry | None = None
        self._pinned: dict[str, None] = {}

    def pinned(self, session: PiSession) -> frozenset[str]:
        entries = session.entries
        seen = self._seen
        if (
            session.session_id != self._session_id
            or seen > len(entries)
            or (seen and entries[seen - 1] is not self._last)
        ):  # another session, or the file was rewritten: replay from the first entry
            self._session_id, self._pinned, seen = session.session_id, {}, 0
        for entry in entries[seen:]:
            event = pi_index_event(entry)
            if event is None:
                continue
            if event.kind == "pin":
                self._pinned[event.target] = None
            elif event.kind == "unpin":
                self._pinned.pop(event.target, None)
        self._seen = len(entries)
        self._last = entries[-1] if entries else None
        return frozenset(self._pinned)
