"""The summaries a Pi session holds (compactions and branch summaries) and the texts they may quote.

Pi writes a ``compaction`` entry (``summary``, ``firstKeptEntryId``, ``tokensBefore``) when it cut the
history before an entry, and a ``branch_summary`` entry (``summary``, ``fromId``) when the user left a
branch. :class:`PiSummary` is one of them with its fields checked and typed, so a view over summaries
needs no knowledge of the entry layout; :func:`pi_entry_texts` is what a summary of an entry could quote.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final, Literal, TypeAlias

import msgspec

from ._reader import PiEntry, PiSession

__all__ = ["PiSummary", "PiSummaryKind", "pi_entry_texts", "pi_summaries", "pi_summary"]

PiSummaryKind: TypeAlias = Literal["compaction", "branch-summary"]

_KINDS: Final[dict[str, PiSummaryKind]] = {"compaction": "compaction", "branch_summary": "branch-summary"}
# The message fields besides ``content`` whose text a summary may repeat (bash runs, tool names ...).
_MESSAGE_TEXT_FIELDS: Final = ("command", "output", "summary", "toolName")


class PiSummary(msgspec.Struct, frozen=True, kw_only=True):
    """A compaction or branch summary entry with its fields typed.

    ``text`` is ``""`` when the summary is missing or not text; ``tokens_before`` is ``None`` unless it
    is an int >= 0. ``first_kept_entry_id`` (compactions only) is where the kept history starts;
    ``from_id`` (branch summaries only) is the entry the left branch ended at. Neither is checked
    against the session: an id that names no entry is passed on as written.
    """

    entry: PiEntry
    kind: PiSummaryKind
    text: str
    tokens_before: int | None
    first_kept_entry_id: str | None = None
    from_id: str | None = None


def _text_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def pi_summary(entry: PiEntry) -> PiSummary | None:
    """``entry`` as a :class:`PiSummary`, or ``None`` when it is neither a compaction nor a branch summary."""
    kind = _KINDS.get(entry.type)
    if kind is None:
        return None
    data = entry.data
    tokens = data.get("tokensBefore")
    compaction = kind == "compaction"
    return PiSummary(
        entry=entry,
        kind=kind,
        text=_text_or_none(data.get("summary")) or "",
        tokens_before=tokens if type(tokens) is int and tokens >= 0 else None,
        first_kept_entry_id=_text_or_none(data.get("firstKeptEntryId")) if compaction else None,
        from_id=None if compaction else _text_or_none(data.get("fromId")),
    )


def pi_summaries(session: PiSession) -> tuple[PiSummary, ...]:
    """Every compaction and branch summary of ``session``, on any branch, in file order."""
    # the type test first: most entries are messages, and this runs over every entry of the file
    return tuple(
        summary
        for entry in session.entries
        if entry.type in _KINDS and (summary := pi_summary(entry)) is not None
    )


def _strings(value: Any) -> Iterator[str]:
    """The strings of a JSON value (tool arguments, details), depth first; other scalars as text."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, bool | int | float):
        yield str(value)


def _content_texts(content: Any) -> Iterator[str]:
    if isinstance(content, str):
        yield content
        return
    if not isinstance(content, list):
        return
    for block in content:
        if not isinstance(block, dict):
            continue
        for key in ("text", "thinking"):
            if isinstance(block.get(key), str):
                yield block[key]
        if block.get("type") == "toolCall":
            if isinstance(block.get("name"), str):
                yield block["name"]
            yield from _strings(block.get("arguments"))


def _texts(entry: PiEntry) -> Iterator[str]:
    data = entry.data
    if entry.type == "message" and isinstance(data.get("message"), dict):
        message = data["message"]
        yield from _content_texts(message.get("content"))
        for key in _MESSAGE_TEXT_FIELDS:
            if isinstance(message.get(key), str):
                yield message[key]
    elif entry.type in _KINDS:
        if isinstance(data.get("summary"), str):
            yield data["summary"]
        yield from _strings(data.get("details"))
    elif entry.type == "custom_message":
        yield from _content_texts(data.get("content"))


def pi_entry_texts(entry: PiEntry) -> tuple[str, ...]:
    """Everything a summary of ``entry`` could quote: message text and thinking, tool calls with their
    arguments, tool and bash outputs, and the text and details of earlier summaries; in entry order.
    """
    return tuple(_texts(entry))
