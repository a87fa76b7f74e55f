"""Canonical history: decoding, encoding, snapshots, tool atomic groups and validation.

Everything a host or adapter needs to read, check and exchange ``runtime-history-v1`` history::

    messages = decode_canonical_messages_jsonl(data)
    snapshot = build_runtime_history_snapshot(runtime_id=..., session_id=..., revision=...,
                                              project_root=..., messages=messages)
    assert_valid_runtime_history_snapshot(snapshot, trusted_project_root=root)

Decoding rejects bad input with a ``HistoryRecordError`` whose ``code`` is one of
``HISTORY_DECODE_CODES``; validation reports broken invariants with ``HISTORY_VALIDATION_CODES``.
"""

from __future__ import annotations

from ._exports import adopt_public_names
from ._history._decode import (
    CANONICAL_BLOCK_TYPES,
    HISTORY_DECODE_CODES,
    HISTORY_MAX_BYTES,
    HISTORY_MAX_MESSAGES,
    HISTORY_MAX_NESTING_DEPTH,
    UNKNOWN_BLOCK_POLICIES,
    UnknownBlockPolicy,
    check_message_identifiers,
    check_message_nesting,
    decode_canonical_message,
    decode_canonical_messages_jsonl,
    decode_runtime_history_snapshot,
    encode_canonical_message,
    encode_canonical_messages_jsonl,
    encode_runtime_history_snapshot,
)
from ._history._groups import (
    TOOL_ATOMIC_GROUP_ID_PREFIX,
    build_canonical_tool_atomic_groups,
    tool_atomic_group_id,
)
from ._history._model import (
    HISTORY_MAX_IDENTIFIER_CHARS,
    HISTORY_MAX_PATH_CHARS,
    HISTORY_MAX_TEXT_CHARS,
    HISTORY_SCHEMA_VERSION,
)
from ._history._stable_json import STABLE_JSON_ERROR_CODES, STABLE_JSON_MAX_DEPTH, STABLE_JSON_VERSION
from ._history._validation import (
    HISTORY_VALIDATION_CODES,
    HISTORY_VALIDATION_FAILED,
    HistoryValidationIssue,
    assert_valid_runtime_history_snapshot,
    build_runtime_history_snapshot,
    validate_runtime_history_snapshot,
)

__all__ = [
    "CANONICAL_BLOCK_TYPES",
    "HISTORY_DECODE_CODES",
    "HISTORY_MAX_BYTES",
    "HISTORY_MAX_IDENTIFIER_CHARS",
    "HISTORY_MAX_MESSAGES",
    "HISTORY_MAX_NESTING_DEPTH",
    "HISTORY_MAX_PATH_CHARS",
    "HISTORY_MAX_TEXT_CHARS",
    "HISTORY_SCHEMA_VERSION",
    "HISTORY_VALIDATION_CODES",
    "HISTORY_VALIDATION_FAILED",
    "STABLE_JSON_ERROR_CODES",
    "STABLE_JSON_MAX_DEPTH",
    "STABLE_JSON_VERSION",
    "TOOL_ATOMIC_GROUP_ID_PREFIX",
    "UNKNOWN_BLOCK_POLICIES",
    "HistoryValidationIssue",
    "UnknownBlockPolicy",
    "assert_valid_runtime_history_snapshot",
    "build_canonical_tool_atomic_groups",
    "build_runtime_history_snapshot",
    "check_message_identifiers",
    "check_message_nesting",
    "decode_canonical_message",
    "decode_canonical_messages_jsonl",
    "decode_runtime_history_snapshot",
    "encode_canonical_message",
    "encode_canonical_messages_jsonl",
    "encode_runtime_history_snapshot",
    "tool_atomic_group_id",
    "validate_runtime_history_snapshot",
]

adopt_public_names(__name__, globals())
