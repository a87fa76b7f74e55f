"""Tool atomic groups: every tool call joined with all of its results, and the call/result relations.

The groups are the planner's tool units: :func:`build_canonical_tool_atomic_groups` reads them from the
history index (``_planner/_index.py``, where atomic groups are built), so the planner, this builder and
snapshot validation can never disagree on which messages belong together. A message holding a
``toolCall`` is joined with every message holding a matching ``toolResult``; all calls of one assistant
message share that message, so a parallel batch is always one group. Results whose call never appears
are joined by their call id too, so every id lands in exactly one group and an orphan is reported by
validation instead of vanishing.

:func:`collect_tool_relations` lists where each call id is made and answered, for the identity checks of
validation. Its scan is written as C-level passes (``map``/``chain`` over attribute getters) because it
runs on every snapshot of histories with 100,000 messages.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from functools import partial
from itertools import accumulate, chain, compress, count, repeat
from operator import attrgetter, is_

from ds4_context_core._planner._index import (
    TOOL_ATOMIC_GROUP_ID_PREFIX,
    index_tool_units,
    tool_atomic_group_id,
    tool_atomic_groups,
    tool_ids_regular,
)

from ._model import (
    ArtifactReferenceBlock,
    CanonicalMessage,
    FileReferenceBlock,
    ImageBlock,
    OpaqueProviderBlock,
    RuntimeToolAtomicGroup,
    SummaryReferenceBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
)

__all__ = [
    "TOOL_ATOMIC_GROUP_ID_PREFIX",
    "CheckedGroups",
    "ToolRelations",
    "build_canonical_tool_atomic_groups",
    "collect_tool_relations",
    "group_and_check",
    "tool_atomic_group_id",
]


_blocks_of = attrgetter("blocks")
_message_id = attrgetter("id")
_call_id = attrgetter("id")
_result_call_id = attrgetter("tool_call_id")
# every block type but the tool call and result: a history of these alone has no tool units
_PLAIN_BLOCK_TYPES = frozenset(
    {
        ArtifactReferenceBlock,
        FileReferenceBlock,
        ImageBlock,
        OpaqueProviderBlock,
        SummaryReferenceBlock,
        TextBlock,
        ThinkingBlock,
    }
)


class ToolRelations:
    """Message positions holding each tool call id (``calls``) and each answered id (``results``).

    A position is listed once per block, so a call id used twice, even within one message, stays visible.
    """

    __slots__ = ("calls", "results")

    def __init__(self, calls: dict[str, list[int]], results: dict[str, list[int]]) -> None:
        self.calls = calls
        self.results = results


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


def build_canonical_tool_atomic_groups(
    messages: Sequence[CanonicalMessage],
) -> tuple[RuntimeToolAtomicGroup, ...]:
    """Group tool calls with their results.

    ``complete`` is true when every call id in the group has exactly one call block and at least one
    result, all inside the group. Groups are sorted by their first message id (code point order); message
    ids keep history order; ``tool_call_ids`` are sorted and unique. Messages with duplicate ids are
    grouped by position, so a corrupt history still yields groups that validation can report on.
    """
    return tool_atomic_groups(index_tool_units(messages))


class CheckedGroups:
    """The groups of a history, with what validation's call-id checks need from the same walk.

    ``ids_regular``: every call id is made by exactly one call block and every result answers a call
    the history makes; ``call_ids``: every call id, in history order. Only when the ids are irregular
    (or one is malformed) does validation need :func:`collect_tool_relations` to say which.
    """

    __slots__ = ("call_ids", "groups", "ids_regular")

    def __init__(
        self, groups: tuple[RuntimeToolAtomicGroup, ...], call_ids: list[str], ids_regular: bool
    ) -> None:
        self.groups = groups
        self.call_ids = call_ids
        self.ids_regular = ids_regular


def _without_tool_blocks(messages: Sequence[CanonicalMessage]) -> bool:
    """Whether ``messages`` are well-formed messages none of which holds a tool call or result.

    Such a history has no tool units, so no groups and no call ids: the tool unit index (a list slot
    and an integer per message, ~45 bytes a message while a snapshot is built) is not needed. Anything
    unusual (another item type, an id that is not a string, blocks that are not a tuple of known blocks)
    takes the index's path, which reports it exactly as before. C-level passes: it runs on every
    snapshot.
    """
    if not messages or set(map(type, messages)) != {CanonicalMessage}:
        return False
    if set(map(type, map(_message_id, messages))) != {str}:
        return False
    block_lists = list(map(_blocks_of, messages))
    if set(map(type, block_lists)) != {tuple}:
        return False
    return set(map(type, chain.from_iterable(block_lists))) <= _PLAIN_BLOCK_TYPES


def group_and_check(messages: Sequence[CanonicalMessage]) -> CheckedGroups:
    """:func:`build_canonical_tool_atomic_groups` and the call-id facts of the same walk."""
    if _without_tool_blocks(messages):
        return CheckedGroups((), [], True)
    index = index_tool_units(messages)
    return CheckedGroups(tool_atomic_groups(index), list(index.callers), tool_ids_regular(index))
