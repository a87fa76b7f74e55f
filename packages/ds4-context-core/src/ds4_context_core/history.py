"""Canonical history: snapshots, tool atomic groups and validation (``runtime-history-v1``).

Everything a host or adapter needs to project, check and exchange canonical history::

    snapshot = build_runtime_history_snapshot(runtime_id=..., session_id=..., revision=...,
                                              project_root=..., messages=messages)
    assert_valid_runtime_history_snapshot(snapshot, trusted_project_root=root)
"""

from __future__ import annotations

from ._groups import TOOL_ATOMIC_GROUP_ID_PREFIX, build_canonical_tool_atomic_groups, tool_atomic_group_id
from ._model import HISTORY_SCHEMA_VERSION
from ._validation import (
    HISTORY_MAX_IDENTIFIER_CHARS,
    HISTORY_VALIDATION_CODES,
    HISTORY_VALIDATION_FAILED,
    HistoryValidationIssue,
    assert_valid_runtime_history_snapshot,
    build_runtime_history_snapshot,
    validate_runtime_history_snapshot,
)

__all__ = [
    "HISTORY_MAX_IDENTIFIER_CHARS",
    "HISTORY_SCHEMA_VERSION",
    "HISTORY_VALIDATION_CODES",
    "HISTORY_VALIDATION_FAILED",
    "TOOL_ATOMIC_GROUP_ID_PREFIX",
    "HistoryValidationIssue",
    "assert_valid_runtime_history_snapshot",
    "build_canonical_tool_atomic_groups",
    "build_runtime_history_snapshot",
    "tool_atomic_group_id",
    "validate_runtime_history_snapshot",
]
