"""Tool atomic groups: every tool call joined with all of its results.

Union-find over message positions: a message holding a ``toolCall`` is joined with every message holding
a matching ``toolResult``. All calls of one assistant message share that message, so a parallel batch is
always one group. Results whose call never appears are joined by their call id too, so every id lands in
exactly one group and an orphan is reported by validation instead of vanishing. Linear in the number of
blocks (near-linear with path compression).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Final

from ._model import CanonicalMessage, RuntimeToolAtomicGroup, ToolCallBlock, ToolResultBlock

__all__ = [
    "ToolRelations",
    "build_canonical_tool_atomic_groups",
    "collect_tool_relations",
    "groups_from_relations",
    "tool_atomic_group_id",
]

TOOL_ATOMIC_GROUP_ID_PREFIX: Final = "runtime-tool-group:"


class ToolRelations:
    """Positions of the messages holding each tool call id (``calls``) and each result id (``results``)."""

    __slots__ = ("calls", "results")

    def __init__(self) -> None:
        self.calls: dict[str, list[int]] = {}
        self.results: dict[str, list[int]] = {}


def tool_atomic_group_id(message_ids: Iterable[str]) -> str:
    """Deterministic group id: prefix + first 16 hex chars of sha256 of the NUL-joined message ids."""
    digest = hashlib.sha256("\0".join(message_ids).encode("utf-8", "surrogatepass")).hexdigest()
    return TOOL_ATOMIC_GROUP_ID_PREFIX + digest[:16]


def collect_tool_relations(messages: Sequence[CanonicalMessage]) -> ToolRelations:
    """One pass over every block; a position is listed once per block, so duplicates stay visible."""
    relations = ToolRelations()
    calls = relations.calls
    results = relations.results
    for position, message in enumerate(messages):
        for block in message.blocks:
            kind = type(block)
            if kind is ToolCallBlock:
                key = block.id  # type: ignore[union-attr]
                found = calls.get(key)
                if found is None:
                    calls[key] = [position]
                else:
                    found.append(position)
            elif kind is ToolResultBlock:
                key = block.tool_call_id  # type: ignore[union-attr]
                found = results.get(key)
                if found is None:
                    results[key] = [position]
                else:
                    found.append(position)
    return relations


def groups_from_relations(
    messages: Sequence[CanonicalMessage], relations: ToolRelations
) -> tuple[RuntimeToolAtomicGroup, ...]:
    """Build the groups from already collected relations (validation shares one scan with grouping)."""
    calls = relations.calls
    results = relations.results
    if not calls and not results:
        return ()
    parent: dict[int, int] = {}

    def find(position: int) -> int:
        root = position
        while (up := parent[root]) != root:
            root = up
        while (up := parent[position]) != root:  # path compression keeps this near-linear
            parent[position] = root
            position = up
        return root

    def join(positions: list[int]) -> None:
        first = positions[0]
        parent.setdefault(first, first)
        root = find(first)
        for other in positions[1:]:
            parent.setdefault(other, other)
            other_root = find(other)
            if other_root != root:
                # The smaller position becomes the root, so a group's root is its first message.
                if other_root < root:
                    parent[root] = other_root
                    root = other_root
                else:
                    parent[other_root] = root

    for call_id, positions in calls.items():
        answered = results.get(call_id)
        join(positions + answered if answered else positions)
    for call_id, positions in results.items():
        if call_id not in calls:
            join(positions)

    members: dict[int, list[int]] = {}
    for position in sorted(parent):
        root = find(position)
        found = members.get(root)
        if found is None:
            members[root] = [position]
        else:
            found.append(position)
    root_of = {position: find(position) for position in parent}

    ids_by_root: dict[int, set[str]] = {root: set() for root in members}
    for call_id, positions in calls.items():
        ids_by_root[root_of[positions[0]]].add(call_id)
    for call_id, positions in results.items():
        ids_by_root[root_of[positions[0]]].add(call_id)

    groups: list[RuntimeToolAtomicGroup] = []
    for root, positions in members.items():
        call_ids = ids_by_root[root]
        # Every call and result of an id is inside its group by construction (union-find), so completeness
        # reduces to: exactly one call block and at least one result block per id.
        complete = all(len(calls.get(call_id, ())) == 1 and call_id in results for call_id in call_ids)
        message_ids = tuple(messages[position].id for position in positions)
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


def build_canonical_tool_atomic_groups(
    messages: Sequence[CanonicalMessage],
) -> tuple[RuntimeToolAtomicGroup, ...]:
    """Group tool calls with their results.

    ``complete`` is true when every call id in the group has exactly one call block and at least one
    result, all inside the group. Groups are sorted by their first message id (code point order); message
    ids keep history order; ``tool_call_ids`` are sorted and unique. Messages with duplicate ids are
    grouped by position, so a corrupt history still yields groups that validation can report on.
    """
    return groups_from_relations(messages, collect_tool_relations(messages))
