"""Tool atomic groups: every tool call joined with all of its results.

Union-find over message positions: a message holding a ``toolCall`` is joined with every message holding
a matching ``toolResult``. All calls of one assistant message share that message, so a parallel batch is
always one group. Results whose call never appears are joined by their call id too, so every id lands in
exactly one group and an orphan is reported by validation instead of vanishing.

Cost is linear in the number of blocks. The scan is written as C-level passes (``map``/``chain`` over
attribute getters) because it runs on every snapshot of histories with 100,000 messages.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from functools import partial
from itertools import accumulate, chain, compress, count, repeat
from operator import attrgetter, is_
from typing import Final

from ._model import CanonicalMessage, RuntimeToolAtomicGroup, ToolCallBlock, ToolResultBlock

__all__ = [
    "TOOL_ATOMIC_GROUP_ID_PREFIX",
    "ToolRelations",
    "build_canonical_tool_atomic_groups",
    "collect_tool_relations",
    "groups_from_relations",
    "tool_atomic_group_id",
]

TOOL_ATOMIC_GROUP_ID_PREFIX: Final = "runtime-tool-group:"

_blocks_of = attrgetter("blocks")
_call_id = attrgetter("id")
_result_call_id = attrgetter("tool_call_id")


class ToolRelations:
    """Message positions holding each tool call id (``calls``) and each answered id (``results``).

    A position is listed once per block, so a call id used twice, even within one message, stays visible.
    """

    __slots__ = ("calls", "results")

    def __init__(self, calls: dict[str, list[int]], results: dict[str, list[int]]) -> None:
        self.calls = calls
        self.results = results


def tool_atomic_group_id(message_ids: Iterable[str]) -> str:
    """Deterministic group id: prefix + first 16 hex chars of sha256 of the NUL-joined message ids."""
    digest = hashlib.sha256("\0".join(message_ids).encode("utf-8", "surrogatepass")).hexdigest()
    return TOOL_ATOMIC_GROUP_ID_PREFIX + digest[:16]


def _index(keys: list[str], positions: list[int]) -> dict[str, list[int]]:
    if len(set(keys)) == len(keys):  # the common case: every id once
        return dict(zip(keys, [[position] for position in positions], strict=True))
    index: dict[str, list[int]] = {}
    for key, position in zip(keys, positions, strict=True):
        found = index.get(key)
        if found is None:
            index[key] = [position]
        else:
            found.append(position)
    return index


def _positions_of(kind: type, kinds: list[type], ends: list[int]) -> tuple[list[int], list[int]]:
    """Flat block indices of ``kind`` and the message position owning each one."""
    flat = list(compress(count(), map(is_, kinds, repeat(kind))))
    return flat, list(map(partial(bisect_right, ends), flat))


def collect_tool_relations(messages: Sequence[CanonicalMessage]) -> ToolRelations:
    """One pass over every block of ``messages``."""
    block_lists = list(map(_blocks_of, messages))
    blocks = list(chain.from_iterable(block_lists))
    kinds = list(map(type, blocks))
    ends = list(accumulate(map(len, block_lists)))
    call_flat, call_owners = _positions_of(ToolCallBlock, kinds, ends)
    result_flat, result_owners = _positions_of(ToolResultBlock, kinds, ends)
    call_ids = list(map(_call_id, map(blocks.__getitem__, call_flat)))
    result_ids = list(map(_result_call_id, map(blocks.__getitem__, result_flat)))
    return ToolRelations(_index(call_ids, call_owners), _index(result_ids, result_owners))


def _root(parent: list[int], position: int) -> int:
    # Path splitting: every visited node skips to its grandparent, which keeps later walks short.
    while (up := parent[position]) != position:
        parent[position] = parent[up]
        position = up
    return position


def _link(parent: list[int], positions: list[int]) -> None:
    """Union the positions. The smaller root always wins, so a root is its group's first message."""
    root = _root(parent, positions[0])
    for position in positions[1:]:
        other = _root(parent, position)
        if other < root:
            parent[root] = other
            root = other
        elif other != root:
            parent[other] = root


def groups_from_relations(
    messages: Sequence[CanonicalMessage], relations: ToolRelations
) -> tuple[RuntimeToolAtomicGroup, ...]:
    """Build the groups from already collected relations (validation shares one scan with grouping)."""
    calls = relations.calls
    results = relations.results
    if not calls and not results:
        return ()
    parent = list(range(len(messages)))
    for call_id, positions in calls.items():
        answered = results.get(call_id)
        if answered is not None:
            _link(parent, positions + answered)
        elif len(positions) > 1:
            _link(parent, positions)
    for call_id, positions in results.items():
        if len(positions) > 1 and call_id not in calls:
            _link(parent, positions)

    involved = sorted(set(chain(chain.from_iterable(calls.values()), chain.from_iterable(results.values()))))
    members: dict[int, list[int]] = {}
    for position in involved:
        root = position
        while (up := parent[root]) != root:
            root = up
        parent[position] = root
        found = members.get(root)
        if found is None:
            members[root] = [position]
        else:
            found.append(position)

    ids_by_root: dict[int, list[str]] = {root: [] for root in members}
    complete_by_root = dict.fromkeys(members, True)
    for call_id, positions in calls.items():
        root = parent[positions[0]]  # every involved position now points straight at its root
        ids_by_root[root].append(call_id)
        # Every block of an id is inside its group by construction, so completeness reduces to:
        # exactly one call block and at least one result block for every id of the group.
        if len(positions) != 1 or call_id not in results:
            complete_by_root[root] = False
    for call_id, positions in results.items():
        if call_id not in calls:
            root = parent[positions[0]]
            ids_by_root[root].append(call_id)
            complete_by_root[root] = False

    groups: list[RuntimeToolAtomicGroup] = []
    for root, positions in members.items():
        message_ids = tuple([messages[position].id for position in positions])
        ids = ids_by_root[root]
        groups.append(
            RuntimeToolAtomicGroup(
                id=tool_atomic_group_id(message_ids),
                message_ids=message_ids,
                tool_call_ids=tuple(sorted(ids)) if len(ids) > 1 else tuple(ids),
                complete=complete_by_root[root],
            )
        )
    # Groups already run by first position; the reference orders them by first message id, which
    # differs only when ids are not in history order.
    groups.sort(key=_first_message_id)
    return tuple(groups)


def _first_message_id(group: RuntimeToolAtomicGroup) -> str:
    return group.message_ids[0]


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
