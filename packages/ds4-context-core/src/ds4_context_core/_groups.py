"""Tool atomic groups: every tool call joined with all of its results.

Union-find over messages: a message holding a ``toolCall`` is joined with every message holding a
matching ``toolResult``. All calls of one assistant message share the message, so a parallel batch is
always one group. Linear in the number of blocks.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

from ._model import CanonicalMessage, RuntimeToolAtomicGroup, ToolCallBlock, ToolResultBlock

__all__ = ["build_canonical_tool_atomic_groups", "tool_atomic_group_id"]

_GROUP_ID_PREFIX = "runtime-tool-group:"


def tool_atomic_group_id(message_ids: Iterable[str]) -> str:
    """Deterministic group id: prefix + first 16 hex chars of sha256 of the NUL-joined message ids."""
    digest = hashlib.sha256("\0".join(message_ids).encode("utf-8")).hexdigest()
    return _GROUP_ID_PREFIX + digest[:16]


def build_canonical_tool_atomic_groups(
    messages: Sequence[CanonicalMessage],
) -> tuple[RuntimeToolAtomicGroup, ...]:
    """Group tool calls with their results.

    ``complete`` is true when every call id in the group has exactly one call and at least one result,
    all inside the group. Groups are sorted by their first message id; message ids keep history order.
    Messages with duplicate ids are grouped by position, so a corrupt history still yields groups that
    validation can report on instead of crashing.
    """
    parent = list(range(len(messages)))

    def find(index: int) -> int:
        root = index
        while parent[root] != root:
            root = parent[root]
        while parent[index] != root:  # path compression keeps this near-linear
            parent[index], index = root, parent[index]
        return root

    callers: dict[str, list[int]] = {}
    answerers: dict[str, list[int]] = {}
    for position, message in enumerate(messages):
        for block in message.blocks:
            kind = type(block)
            if kind is ToolCallBlock:
                callers.setdefault(block.id, []).append(position)  # type: ignore[union-attr]
            elif kind is ToolResultBlock:
                answerers.setdefault(block.tool_call_id, []).append(position)  # type: ignore[union-attr]

    involved: set[int] = set()
    for call_id, positions in callers.items():
        linked = positions + answerers.get(call_id, [])
        involved.update(linked)
        root = find(linked[0])
        for other in linked[1:]:
            other_root = find(other)
            if other_root != root:
                parent[other_root] = root
    # Results whose call never appears still form a unit: an orphan is reported, never dropped.
    for call_id, positions in answerers.items():
        if call_id in callers:
            continue
        involved.update(positions)
        root = find(positions[0])
        for other in positions[1:]:
            other_root = find(other)
            if other_root != root:
                parent[other_root] = root

    members: dict[int, list[int]] = {}
    for position in sorted(involved):
        members.setdefault(find(position), []).append(position)

    groups: list[RuntimeToolAtomicGroup] = []
    for positions in members.values():
        message_ids = tuple(messages[p].id for p in positions)
        call_ids: set[str] = set()
        for p in positions:
            call_ids.update(messages[p].tool_call_ids)
            call_ids.update(messages[p].tool_result_ids)
        inside = set(positions)
        complete = all(
            len(callers.get(call_id, ())) == 1
            and bool(answerers.get(call_id))
            and all(p in inside for p in callers.get(call_id, ()))
            and all(p in inside for p in answerers.get(call_id, ()))
            for call_id in call_ids
        )
        groups.append(
            RuntimeToolAtomicGroup(
                id=tool_atomic_group_id(message_ids),
                message_ids=message_ids,
                tool_call_ids=tuple(sorted(call_ids)),
                complete=complete,
            )
        )
    groups.sort(key=lambda group: group.message_ids[0])
    return tuple(groups)
