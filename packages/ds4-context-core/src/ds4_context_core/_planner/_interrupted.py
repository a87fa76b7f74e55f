"""Interrupted calls: a tool call that never got its result, in a turn the user has since moved on from.

A provider rejects a call without a result, so such a unit cannot go out as it is; dropping it whole
(as the planner once did) also dropped what the assistant said in it. Instead the calling message is
sent as a copy in which each unanswered call becomes a line of text saying the call was interrupted, and
the results that did come back stay with their calls. A call still open after the current request may
be in flight and is left out, as before.
"""

from __future__ import annotations

from typing import Final

import msgspec

from ds4_context_core._history._model import CanonicalBlock, CanonicalMessage, TextBlock, ToolCallBlock

from ._decisions import PlanInputs, Trim
from ._index import INCOMPLETE, HistoryIndex
from ._pruning import TRIM_MARKER_PREFIX, identifying_arguments

INTERRUPTED_NOTE: Final = "was interrupted before it returned a result; it may not have run"


def interruptible(index: HistoryIndex, root: int) -> bool:
    """Whether the incomplete unit at ``root`` is an interrupted turn that can be sent repaired."""
    if index.incomplete.get(root) != INCOMPLETE or root in index.bad:
        return False
    current = index.current_request()
    return current is not None and index.unit_members(root)[-1] < current


def interrupted_copy(message: CanonicalMessage, answered: set[str]) -> CanonicalMessage | None:
    """``message`` with each call that no result answers turned into a note; ``None`` when it has none."""
    blocks: list[CanonicalBlock] = []
    changed = False
    for block in message.blocks:
        if type(block) is ToolCallBlock and block.id not in answered:
            arguments = identifying_arguments(block.arguments)
            name = block.name if isinstance(block.name, str) else "?"
            call = f"{name} {arguments}".strip()
            blocks.append(TextBlock(text=f"{TRIM_MARKER_PREFIX}the tool call {call} {INTERRUPTED_NOTE}]"))
            changed = True
        else:
            blocks.append(block)
    if not changed:
        return None
    flags = msgspec.structs.replace(message.flags, synthetic=True)
    return msgspec.structs.replace(message, blocks=tuple(blocks), flags=flags)


def repair_interrupted(inputs: PlanInputs, root: int) -> dict[int, Trim]:
    """The repaired copies of the calling messages of the unit at ``root``, by position."""
    index = inputs.index
    copies: dict[int, Trim] = {}
    for position in index.unit_members(root):
        message = index.view[position]
        repaired = interrupted_copy(message, index.answered)
        if repaired is not None:
            copies[position] = Trim(
                position=position, message=repaired, tokens=inputs.estimator(repaired), score=None
            )
    return copies
