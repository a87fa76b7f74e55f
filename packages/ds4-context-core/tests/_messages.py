"""Canonical messages for planner tests: entry ``e`` of session ``s`` becomes message ``s:e``."""

from __future__ import annotations

import ds4_context_core as core


def message(entry, role, blocks, **flags):
    return core.CanonicalMessage(
        id=f"s:{entry}",
        source_entry_id=entry,
        role=role,
        blocks=tuple(blocks),
        provenance=core.Provenance(source="runtime-session", session_id="s", entry_id=entry),
        flags=core.MessageFlags(**flags),
    )
