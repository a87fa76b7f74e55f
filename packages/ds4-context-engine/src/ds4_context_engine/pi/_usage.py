"""The token usage Pi records on its assistant messages, as typed records.

Pi writes the provider's counts on every assistant message it got back (``usage``: ``input``,
``output``, ``cacheRead``, ``cacheWrite``, ``totalTokens``) next to the ``provider``, the ``model`` and
the ``stopReason``. :class:`PiReportedUsage` is one such message with those fields checked, so token
calibration needs no knowledge of the message layout.
"""

from __future__ import annotations

from typing import Final

import msgspec

from ds4_context_core.tokens import read_reported_input

from ._reader import PiEntry, PiSession, memo_mark, seen_by

__all__ = ["PiReportedUsage", "pi_reported_usage", "pi_reported_usages"]

# Calls that ended in an error or were aborted may report partial or zero usage.
_INCOMPLETE_STOPS: Final = frozenset({"error", "aborted"})


class PiReportedUsage(msgspec.Struct, frozen=True, kw_only=True):
    """The usage of one assistant message.

    ``input_tokens`` is what the provider counted for the request that produced the message, read by
    core's :func:`~ds4_context_core.tokens.read_reported_input` (``None`` when unusable). ``provider``
    and ``model`` are ``None`` unless non-empty text. ``complete`` is false when the call ended in an
    error or was aborted, whose counts may be partial.
    """

    entry: PiEntry
    input_tokens: int | None
    provider: str | None
    model: str | None
    complete: bool


def _name(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def pi_reported_usage(entry: PiEntry) -> PiReportedUsage | None:
    """The usage ``entry`` carries, or ``None`` when it is no assistant message with a ``usage`` field."""
    if entry.type != "message":
        return None
    message = entry.data.get("message")
    if not isinstance(message, dict) or message.get("role") != "assistant" or "usage" not in message:
        return None
    stop = message.get("stopReason")
    return PiReportedUsage(
        entry=entry,
        input_tokens=read_reported_input(message["usage"]).input_tokens,
        provider=_name(message.get("provider")),
        model=_name(message.get("model")),
        complete=not (isinstance(stop, str) and stop in _INCOMPLETE_STOPS),
    )


def pi_reported_usages(session: PiSession) -> tuple[PiReportedUsage, ...]:
    """The usage of every assistant message of ``session`` that carries one, on any branch, in file order.

    Remembered for the entries read so far (in the session's memo, shared by the sessions an append
    grows from it): a re-read after an append reads the usage of the new entries only.
    """
    memo = session.context_memo
    known: tuple[int, PiEntry | None, tuple[PiReportedUsage, ...]] | None = memo.get("usages")
    entries = session.entries
    start, found = (
        (0, ()) if known is None or not seen_by(session, known[0], known[1]) else (known[0], known[2])
    )
    fresh = tuple(
        usage
        for entry in entries[start:]
        if entry.type == "message" and (usage := pi_reported_usage(entry)) is not None
    )
    usages = found + fresh
    memo["usages"] = (*memo_mark(session), usages)
    return usages
