"""The task digest: what a plan's cut took away from the task, kept as one small deterministic summary.

When a long session is cut, the model loses the user's original request, the instructions given since,
and which files were read and changed: the task state that LLM-written summaries are known to drop. The
digest is built from the cut messages alone, without a model: the first request, the later user
instructions (the first few and the latest), the files the tool calls named and the tools used. It goes
to the planner as a ``summary`` supplement, which the planner puts in front of the history. Between
compactions the cut does not move, so the digest, and with it the cached prefix, stays byte-identical.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Final, NamedTuple

from ds4_context_core import CanonicalMessage, TextBlock, ToolCallBlock
from ds4_context_core.config import DEFAULT_WRITE_TOOLS
from ds4_context_core.planner import ContextPlan, SupplementalItem
from ds4_context_core.pruning import call_path, normalize_tool_name

__all__ = [
    "CUT_SUPPLEMENT_PASSES",
    "TASK_DIGEST_ID",
    "TASK_DIGEST_MAX_CHARS",
    "SettledPlan",
    "cut_key",
    "cut_messages",
    "plan_with_cut_supplements",
    "settle_cut_supplements",
    "task_digest",
]

CUT_SUPPLEMENT_PASSES: Final = 3
TASK_DIGEST_ID: Final = "ds4-task-digest"
TASK_DIGEST_MAX_CHARS: Final = 4_000
_REQUEST_CHARS: Final = 600
_INSTRUCTION_CHARS: Final = 200
_EARLY_INSTRUCTIONS: Final = 4
_LATE_INSTRUCTIONS: Final = 8
_FILES: Final = 40
# Text holding a privacy marker tag is left out: its spans only mean what they say in their own string.
_TAG: Final = re.compile(r"\[/?ds4:", re.IGNORECASE)
# Kinds whose items stand for history messages at their original index.
_HISTORY_KINDS: Final = frozenset({"message", "trimmed-tool-result", "receipt"})


def cut_messages(messages: Sequence[CanonicalMessage], plan: ContextPlan) -> Sequence[CanonicalMessage]:
    """The messages before the first history message ``plan`` keeps (pinned ones stay in the count)."""
    kept = [item.original_index for item in plan.items if item.kind in _HISTORY_KINDS]
    first = min((index for index in kept if index is not None), default=None)
    if first is None:
        # nothing but mandatory items survived: all history before the current request was cut
        first = next((item.original_index for item in plan.items if item.kind == "current-request"), None)
    return messages[: first or 0]


def _shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _text(message: CanonicalMessage) -> str:
    return "\n".join(block.text for block in message.blocks if isinstance(block, TextBlock))


def _calls(messages: Iterable[CanonicalMessage]) -> Iterable[ToolCallBlock]:
    for message in messages:
        for block in message.blocks:
            if isinstance(block, ToolCallBlock):
                yield block


def _listing(paths: Sequence[str]) -> str:
    shown = ", ".join(_shorten(path, 120) for path in paths[:_FILES])
    more = len(paths) - _FILES
    return shown + (f" and {more} more" if more > 0 else "")


def task_digest(
    messages: Sequence[CanonicalMessage],
    plan: ContextPlan,
    *,
    write_tools: Iterable[str] = DEFAULT_WRITE_TOOLS,
) -> SupplementalItem | None:
    """The digest of what ``plan`` cut from ``messages``, or None when it cut nothing usable.

    Messages flagged ``local_only`` or ``synthetic`` are left out of it. ``write_tools`` (normalised
    names, as in the pruning configuration) decide which files count as changed.
    """
    cut = [m for m in cut_messages(messages, plan) if not (m.flags.local_only or m.flags.synthetic)]
    if not cut:
        return None
    requests = [
        (m, text) for m in cut if m.role == "user" and (text := _text(m).strip()) and not _TAG.search(text)
    ]
    writers = {normalize_tool_name(name) for name in write_tools}
    read: dict[str, None] = {}
    changed: dict[str, None] = {}
    tools: Counter[str] = Counter()
    for call in _calls(cut):
        tools[call.name] += 1
        path = call_path(call)
        if path is not None and not _TAG.search(path):
            (changed if normalize_tool_name(call.name) in writers else read)[path] = None
    if not requests and not tools:
        return None
    lines = [f"[task state from the {len(cut)} earlier messages this context leaves out]"]
    shown: list[CanonicalMessage] = []
    if requests:
        lines.append(f"Original request: {_shorten(requests[0][1], _REQUEST_CHARS)}")
        later = requests[1:]
        # Constraints tend to come early and the latest steps late: keep both ends, drop the middle.
        head, tail = later[:_EARLY_INSTRUCTIONS], later[_EARLY_INSTRUCTIONS:][-_LATE_INSTRUCTIONS:]
        skipped = len(later) - len(head) - len(tail)
        shown = [requests[0][0], *(message for message, _ in head + tail)]
        if later:
            lines.append("Later instructions, oldest first:")
            lines.extend(f"- {_shorten(text, _INSTRUCTION_CHARS)}" for _, text in head)
            if skipped:
                lines.append(f"- ({skipped} more not shown)")
            lines.extend(f"- {_shorten(text, _INSTRUCTION_CHARS)}" for _, text in tail)
    if changed:
        lines.append(f"Files changed: {_listing(list(changed))}")
    read_only = [path for path in read if path not in changed]
    if read_only:
        lines.append(f"Files read: {_listing(read_only)}")
    if tools:
        counts = ", ".join(f"{name} {count}" for name, count in sorted(tools.items()))
        lines.append(f"Tool calls: {counts}")
    text = "\n".join(lines)
    if len(text) > TASK_DIGEST_MAX_CHARS:
        text = text[: TASK_DIGEST_MAX_CHARS - 3] + "..."
    return SupplementalItem(
        id=TASK_DIGEST_ID,
        kind="summary",
        text=text,
        source_ids=tuple(message.id for message in shown),
    )


def cut_key(messages: Sequence[CanonicalMessage], plan: ContextPlan) -> tuple[int, str | None, str | None]:
    """What names the cut of ``plan`` in a session that grows by appends: its length, first and last id.

    Two plans with the same key cut the same messages, so what was built from the cut still holds.
    """
    cut = len(cut_messages(messages, plan)) if plan.fallback is None else 0
    if not cut:
        return 0, None, None
    return cut, messages[0].id, messages[cut - 1].id


def plan_with_cut_supplements(
    messages: Sequence[CanonicalMessage],
    plan: ContextPlan,
    supplements_for: Callable[[ContextPlan], Sequence[SupplementalItem]],
    replan: Callable[[tuple[SupplementalItem, ...]], ContextPlan],
    *,
    passes: int = CUT_SUPPLEMENT_PASSES,
) -> ContextPlan:
    """``plan`` again with the supplements that stand for what it cut, until they sit on their own cut.

    ``supplements_for(plan)`` gives them (the task digest, retrieved history); ``replan(extra)`` must plan
    the same messages from the same state as ``plan`` with ``extra`` added. The supplements' tokens come
    from the oldest kept history, which can move the cut; they are then rebuilt for the new cut, at most
    ``passes`` times, so that the next turn (whose cut is this one while nothing is compacted) builds the
    very same digest and the cached prefix survives.
    """
    return settle_cut_supplements(messages, plan, supplements_for, replan, passes=passes).plan


class SettledPlan(NamedTuple):
    """A plan with the supplements built for its cut, and the cut they were built for."""

    plan: ContextPlan
    extra: tuple[SupplementalItem, ...]
    key: tuple[int, str | None, str | None]


def settle_cut_supplements(
    messages: Sequence[CanonicalMessage],
    plan: ContextPlan,
    supplements_for: Callable[[ContextPlan], Sequence[SupplementalItem]],
    replan: Callable[[tuple[SupplementalItem, ...]], ContextPlan],
    *,
    planned_with: tuple[SupplementalItem, ...] = (),
    planned_for: tuple[int, str | None, str | None] | None = None,
    passes: int = CUT_SUPPLEMENT_PASSES,
) -> SettledPlan:
    """:func:`plan_with_cut_supplements` starting from a plan made with ``planned_with`` already.

    ``planned_for`` is the cut key ``planned_with`` was built for (the previous step's). When ``plan``
    still cuts there, nothing is rebuilt and nothing is planned again: between compactions a step costs
    one plan, and the digest and the retrieved items stay byte-identical (updated in batches, at each
    compaction, not at every step).
    """
    extra = planned_with
    built_for = planned_for
    for _ in range(passes):
        key = cut_key(messages, plan)
        if key == built_for:
            break
        fresh = tuple(supplements_for(plan)) if key[0] else ()
        built_for = key
        if fresh == extra:
            break
        extra = fresh
        plan = replan(extra)
    return SettledPlan(plan, extra, built_for if built_for is not None else cut_key(messages, plan))
