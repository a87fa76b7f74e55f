"""Custom entries: extension state kept in a Pi session file, never sent to the model.

A ``custom`` entry names its owner in ``customType`` and holds any JSON value in ``data``. Our pins,
memory items and tool lifecycle records are custom entries; this module is the one place that knows how
they are laid out, for reading and for appending.
"""

from __future__ import annotations

import os
from typing import Any, Final

import msgspec

from ._reader import PiEntry, PiSession
from ._writer import append_pi_entry

__all__ = ["PiCustomEntry", "append_pi_custom_entry", "pi_custom_entries", "pi_custom_entry"]

_CUSTOM: Final = "custom"


class PiCustomEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One ``custom`` entry. ``custom_type`` is ``None`` unless text; ``value`` is its ``data`` as written
    (any JSON value, ``None`` when absent): its owner decodes and checks it.
    """

    entry: PiEntry
    custom_type: str | None
    value: Any


def pi_custom_entry(entry: PiEntry) -> PiCustomEntry | None:
    """``entry`` as a :class:`PiCustomEntry`, or ``None`` when it is not a ``custom`` entry."""
    if entry.type != _CUSTOM:
        return None
    data = entry.data  # decoded once
    custom_type = data.get("customType")
    return PiCustomEntry(
        entry=entry,
        custom_type=custom_type if isinstance(custom_type, str) else None,
        value=data.get("data"),
    )


def pi_custom_entries(session: PiSession, custom_type: str) -> tuple[PiCustomEntry, ...]:
    """The ``custom`` entries of ``session`` whose ``customType`` is ``custom_type``, in file order."""
    found: list[PiCustomEntry] = []
    for entry in session.entries:
        custom = pi_custom_entry(entry)
        if custom is not None and custom.custom_type == custom_type:
            found.append(custom)
    return tuple(found)


def append_pi_custom_entry(path: str | os.PathLike[str], custom_type: str, data: Any) -> PiEntry:
    """Append a ``custom`` entry holding ``data`` (JSON values) under ``custom_type`` at the current leaf."""
    return append_pi_entry(path, _CUSTOM, {"customType": custom_type, "data": data})
