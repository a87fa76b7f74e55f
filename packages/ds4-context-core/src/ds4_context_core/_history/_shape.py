"""Type screen of a snapshot built in Python: msgspec checks types when it decodes, not at construction.

A snapshot assembled by hand (or with ``msgspec.structs.replace``) can hold a list where an id belongs,
a number as a role or a string as the blocks. The invariant checks would then raise ``TypeError`` or
``AttributeError`` instead of reporting. The screen runs first: a few C-level passes decide the common,
well-typed case; only when one fails is each message looked at alone, to say which.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import chain
from operator import attrgetter
from typing import Final, get_args

from ._model import (
    CanonicalBlock,
    CanonicalMessage,
    MessageFlags,
    MessageRole,
    Provenance,
    ProvenanceSource,
    RuntimeHistorySnapshot,
    RuntimeToolAtomicGroup,
    ToolCallBlock,
    ToolResultBlock,
)

__all__ = [
    "MESSAGE_ROLES",
    "MESSAGE_SHAPE_INVALID",
    "SNAPSHOT_SHAPE_INVALID",
    "groups_typed",
    "malformed_messages",
    "snapshot_fields_typed",
]

SNAPSHOT_SHAPE_INVALID: Final = "history-shape-invalid"
MESSAGE_SHAPE_INVALID: Final = "history-message-shape-invalid"

MESSAGE_ROLES: Final = frozenset(get_args(MessageRole))
_SOURCES: Final = frozenset(get_args(ProvenanceSource))
_BLOCK_TYPES: Final = frozenset(get_args(CanonicalBlock))
_STR: Final = frozenset({str})
_OPTIONAL_STR: Final = frozenset({str, type(None)})
_OPTIONAL_BOOL: Final = frozenset({bool, type(None)})
_SEQUENCES: Final = (tuple, list)

_provenance_of = attrgetter("provenance")
_blocks_of = attrgetter("blocks")


def _types(values: Iterable[object]) -> set[type]:
    return set(map(type, values))


def snapshot_fields_typed(snapshot: RuntimeHistorySnapshot) -> bool:
    """The snapshot's own fields have their declared types (its messages and groups are sequences)."""
    scalars = (snapshot.schema_version, snapshot.runtime_id, snapshot.session_id, snapshot.revision)
    return (
        _types(scalars) <= _STR
        and type(snapshot.project_root) is str
        and isinstance(snapshot.messages, _SEQUENCES)
        and isinstance(snapshot.tool_atomic_groups, _SEQUENCES)
    )


def groups_typed(groups: Iterable[object]) -> bool:
    """Every group is a ``RuntimeToolAtomicGroup`` whose ids are strings."""
    groups = tuple(groups)
    if _types(groups) - {RuntimeToolAtomicGroup}:
        return False
    typed: tuple[RuntimeToolAtomicGroup, ...] = groups  # type: ignore[assignment]
    if _types(map(attrgetter("id"), typed)) - _STR or _types(map(attrgetter("complete"), typed)) - {bool}:
        return False
    members = list(map(attrgetter("message_ids"), typed)) + list(map(attrgetter("tool_call_ids"), typed))
    return not (_types(members) - {tuple}) and not (_types(chain.from_iterable(members)) - _STR)


def _all_text(values: Iterable[object]) -> bool:
    """Every value is a ``str``: joining is one C-level pass and refuses anything else."""
    try:
        "".join(values)  # type: ignore[arg-type]
    except TypeError:
        return False
    return True


def _distinct(values: Iterable[object]) -> set[object] | None:
    """The distinct values (a handful: roles, sources, runtime ids), or None when one cannot be hashed."""
    try:
        return set(values)
    except TypeError:
        return None


def _fields_typed(messages: tuple[CanonicalMessage, ...]) -> bool:
    """What validation and grouping read, in a few C-level passes over the whole history."""
    if not (
        _all_text(map(attrgetter("id"), messages)) and _all_text(map(attrgetter("source_entry_id"), messages))
    ):
        return False
    roles = _distinct(map(attrgetter("role"), messages))
    if roles is None or not roles <= MESSAGE_ROLES:
        return False
    provenances = list(map(_provenance_of, messages))
    if _types(provenances) - {Provenance}:
        return False
    if not (
        _all_text(map(attrgetter("session_id"), provenances))
        and _all_text(map(attrgetter("entry_id"), provenances))
    ):
        return False
    sources = _distinct(map(attrgetter("source"), provenances))
    runtimes = _distinct(map(attrgetter("runtime_id"), provenances))
    if sources is None or not sources <= _SOURCES or runtimes is None or _types(runtimes) - _OPTIONAL_STR:
        return False
    # equal flags are one shared object, so the distinct objects are few: their fields are read one by one
    flags = {id(flag): flag for flag in map(attrgetter("flags"), messages)}.values()
    if _types(flags) - {MessageFlags}:
        return False
    for flag in flags:
        if _types((flag.pinned, flag.atomic, flag.local_only, flag.synthetic)) - _OPTIONAL_BOOL:
            return False
    all_blocks = list(map(_blocks_of, messages))
    if _types(all_blocks) - {tuple}:
        return False
    blocks = list(chain.from_iterable(all_blocks))
    if _types(blocks) - _BLOCK_TYPES:
        return False
    calls = list(filter(ToolCallBlock.__instancecheck__, blocks))
    results = list(filter(ToolResultBlock.__instancecheck__, blocks))
    return (
        _all_text(map(attrgetter("id"), calls))
        and _all_text(map(attrgetter("name"), calls))
        and not (_types(map(attrgetter("arguments"), calls)) - {dict})
        and _all_text(map(attrgetter("tool_call_id"), results))
        and _all_text(map(attrgetter("tool_name"), results))
    )


def malformed_messages(messages: Iterable[object]) -> list[tuple[int, object]]:
    """``(position, message)`` of every message whose fields do not have their declared types."""
    history = tuple(messages)
    if not (_types(history) - {CanonicalMessage}) and _fields_typed(history):  # type: ignore[arg-type]
        return []
    bad: list[tuple[int, object]] = []
    for position, message in enumerate(history):
        if type(message) is not CanonicalMessage or not _fields_typed((message,)):
            bad.append((position, message))
    return bad
