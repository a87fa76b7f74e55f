"""An incremental Server-Sent Events parser (the WHATWG ``text/event-stream`` rules).

Bytes go in as they arrive, split anywhere (inside a UTF-8 character, between the CR and LF of a line
end); complete events come out. Lines end in CRLF, LF or CR; ``:`` starts a comment; ``data`` lines of
one event are joined with newlines; a blank line dispatches; an event with no data is dropped, and so is
an event the stream ends in the middle of (the caller decides whether that was a cut).
"""

from __future__ import annotations

import codecs
import re
from typing import Final

import msgspec

__all__ = ["SseEvent", "SseParser"]

_LINE_END: Final = re.compile(r"\r\n|\r|\n")


class SseEvent(msgspec.Struct, frozen=True, kw_only=True):
    event: str = "message"
    data: str = ""
    id: str | None = None


class SseParser:
    """Feed bytes with :meth:`feed`; each call returns the events completed by those bytes."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buffer = ""
        self._started = False
        self._event = ""
        self._data: list[str] = []
        self._last_id: str | None = None

    def feed(self, chunk: bytes) -> list[SseEvent]:
        text = self._decoder.decode(chunk)
        if not self._started and text:
            self._started = True
            text = text.removeprefix("\ufeff")
        self._buffer += text
        events: list[SseEvent] = []
        position = 0
        while (match := _LINE_END.search(self._buffer, position)) is not None:
            if match.group() == "\r" and match.end() == len(self._buffer):
                break  # a CR at the end may be the first half of a CRLF: wait for the next chunk
            event = self._line(self._buffer[position : match.start()])
            if event is not None:
                events.append(event)
            position = match.end()
        self._buffer = self._buffer[position:]
        return events

    def finish(self) -> list[SseEvent]:
        """At the end of the stream: a CR held back as a possible CRLF was a line end after all."""
        if not self._buffer.endswith("\r"):
            return []
        return self.feed(b"\n")  # CR then LF is one line end: the same line, ended the same way

    @property
    def pending(self) -> bool:
        """True when bytes of an unfinished event are buffered."""
        return bool(self._buffer or self._data or self._event)

    def _line(self, line: str) -> SseEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        field, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if field == "event":
            self._event = value
        elif field == "data":
            self._data.append(value)
        elif field == "id" and "\x00" not in value:
            self._last_id = value
        return None  # "retry" and unknown fields are ignored, as the standard says

    def _dispatch(self) -> SseEvent | None:
        event, data = self._event, self._data
        self._event, self._data = "", []
        if not data:
            return None
        return SseEvent(event=event or "message", data="\n".join(data), id=self._last_id)
