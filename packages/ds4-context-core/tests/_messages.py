"""Canonical messages for planner tests: entry ``e`` of session ``s`` becomes message ``s:e``.

Also ``interpreted_planner_only``: a mark for the few tests that reach into the planner's internals in a
way only interpreted code allows (the compiled core wheel runs the rest of them too).
"""

from __future__ import annotations

import importlib.machinery

import pytest

import ds4_context_core as core
from ds4_context_core._planner import _index

PLANNER_COMPILED = str(_index.__file__).endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
interpreted_planner_only = pytest.mark.skipif(
    PLANNER_COMPILED,
    reason="compiled code calls its module's functions and str's methods directly, not through Python",
)


def message(entry, role, blocks, **flags):
    return core.CanonicalMessage(
        id=f"s:{entry}",
        source_entry_id=entry,
        role=role,
        blocks=tuple(blocks),
        provenance=core.Provenance(source="runtime-session", session_id="s", entry_id=entry),
        flags=core.MessageFlags(**flags),
    )
