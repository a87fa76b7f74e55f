"""Pins and memory items are events in the session itself: Pi ``custom`` entries, replayed by the store.

Because the session file holds them, deleting the derived store loses nothing: a rebuild replays the
events and materializes the same pins and memory items again.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable

from ds4_context_engine.pi import (
    MEMORY_CUSTOM_TYPE,
    PIN_CUSTOM_TYPE,
    UNPIN_CUSTOM_TYPE,
    PiEntry,
    append_pi_custom_entry,
    pi_index_event,
)

from ._records import MemoryItem, PinRecord

__all__ = [
    "MEMORY_CUSTOM_TYPE",
    "PIN_CUSTOM_TYPE",
    "UNPIN_CUSTOM_TYPE",
    "append_memory_event",
    "append_pin_event",
    "append_unpin_event",
    "replay_session_events",
]


def append_pin_event(path: str | os.PathLike[str], entry_id: str, *, label: str | None = None) -> PiEntry:
    """Pin an entry (it stays in every plan until unpinned)."""
    data: dict[str, str] = {"entryId": entry_id}
    if label:
        data["label"] = label
    return append_pi_custom_entry(path, PIN_CUSTOM_TYPE, data)


def append_unpin_event(path: str | os.PathLike[str], entry_id: str) -> PiEntry:
    return append_pi_custom_entry(path, UNPIN_CUSTOM_TYPE, {"entryId": entry_id})


def append_memory_event(
    path: str | os.PathLike[str], *, text: str | None = None, remove_item_id: str | None = None
) -> PiEntry:
    """Add a memory item (``text``) or remove one (``remove_item_id``)."""
    if remove_item_id is not None:
        data = {"op": "remove", "itemId": remove_item_id}
    else:
        data = {"op": "add", "itemId": secrets.token_hex(4), "text": text or ""}
    return append_pi_custom_entry(path, MEMORY_CUSTOM_TYPE, data)


def replay_session_events(
    session_id: str, entries: Iterable[PiEntry]
) -> tuple[tuple[PinRecord, ...], tuple[MemoryItem, ...]]:
    """Pins and memory items after replaying every event in file order (what the store materializes)."""
    pins: dict[str, PinRecord] = {}
    memory: dict[str, MemoryItem] = {}
    for entry in entries:
        event = pi_index_event(entry)
        if event is None:
            continue
        if event.kind == "pin":
            pins[event.target] = PinRecord(
                session_id=session_id, entry_id=event.target, label=event.label, event_entry_id=entry.id
            )
        elif event.kind == "unpin":
            pins.pop(event.target, None)
        elif event.kind == "memory-remove":
            memory.pop(event.target, None)
        else:
            memory[event.target] = MemoryItem(
                session_id=session_id, item_id=event.target, text=event.text or "", event_entry_id=entry.id
            )
    return (
        tuple(pins[key] for key in sorted(pins)),
        tuple(memory[key] for key in sorted(memory)),
    )
