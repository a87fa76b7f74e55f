"""The fixed overhead of a Pi session's requests, measured from the usage Pi recorded.

Pi sends its system prompt and tool definitions with every request, and neither is in the session file,
so the planner cannot estimate them; budgeting them as zero lets a plan filled to the hard limit pass
the window by their size. The provider counted them, though: the input Pi records for a call is the
request's whole prompt. For each of the newest calls on the planned branch (same provider and model),
``reported / ratio - estimate of the messages that request held`` is the overhead in the planner's
units (``chars-v1``, before calibration); the median of those, rounded up to ``OVERHEAD_STEP`` so that it
does not move from one call to the next (a moving overhead moves the cut and breaks the shared prefix),
is what the workspace plans with.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

from ds4_context_core import CanonicalMessage, ModelDescriptor
from ds4_context_core.planner import fast_chars_v1
from ds4_context_engine.pi import PiContext, PiReportedUsage, PiSession, pi_reported_usages

from ._calibrate import calibration_profile

__all__ = ["OVERHEAD_CALLS", "OVERHEAD_STEP", "MessagePrefix", "usage_overhead"]

OVERHEAD_CALLS: Final = 16
OVERHEAD_STEP: Final = 256


class MessagePrefix:
    """Where each entry's first message sits in a branch, the running ``chars-v1`` sums before each, and
    the pinned messages' ids.

    ``sync`` extends them with the messages appended since (a branch grows by appends): a plan at every
    model call then costs what was appended, not a pass over the whole branch. Another branch view
    (another first message, or a message that is not the very object it was: a host compaction, a
    switched leaf, a pin that changed the messages' flags) starts them over.
    """

    __slots__ = ("first_position", "ids", "last", "pinned", "resets", "running", "usages")

    def __init__(self) -> None:
        self.usages = _UsageIndex()
        self.ids: list[str] = []
        self.first_position: dict[str, int] = {}
        self.running: list[int] = [0]
        self.pinned: list[str] = []
        self.last: CanonicalMessage | None = None
        self.resets = 0

    def sync(self, messages: Sequence[CanonicalMessage]) -> None:
        held = len(self.ids)
        if held and (
            held > len(messages) or messages[0].id != self.ids[0] or messages[held - 1] is not self.last
        ):
            self.ids, self.first_position, self.running, self.pinned = [], {}, [0], []
            self.resets += 1
            held = 0
        ids, positions, running, pinned = self.ids, self.first_position, self.running, self.pinned
        for message in messages[held:]:
            positions.setdefault(message.source_entry_id, len(ids))
            ids.append(message.id)
            running.append(running[-1] + fast_chars_v1(message))
            if message.flags.pinned:
                pinned.append(message.id)
        if messages:
            self.last = messages[-1]


class _UsageIndex:
    """The session's usable reported usages grouped by calibration profile, extended by what was appended.

    Without it each plan walks every usage of the session when the newest calls are of another model
    (a replay, a switched model): the per-step cost would follow the whole history, not the append.
    """

    __slots__ = ("by_profile", "first", "seen")

    def __init__(self) -> None:
        self.seen = 0
        self.first: object = None
        self.by_profile: dict[str, list[PiReportedUsage]] = {}

    def of(self, usages: Sequence[PiReportedUsage], profile: str) -> list[PiReportedUsage]:
        if usages and (usages[0] is not self.first or len(usages) < self.seen):
            self.seen, self.first, self.by_profile = 0, usages[0], {}  # another session read: start over
        for usage in usages[self.seen :]:
            if (
                usage.complete
                and usage.input_tokens
                and usage.provider is not None
                and usage.model is not None
            ):
                key = calibration_profile(usage.provider, usage.model)
                self.by_profile.setdefault(key, []).append(usage)
        self.seen = len(usages)
        return self.by_profile.get(profile, [])


def usage_overhead(
    session: PiSession,
    context: PiContext,
    model: ModelDescriptor,
    ratio: float,
    *,
    prefix: MessagePrefix | None = None,
) -> int | None:
    """The overhead measured from the newest calls of ``model`` in ``context``, or ``None`` without any.

    ``prefix`` (kept by the caller from call to call) saves the pass over the branch.
    """
    if prefix is None:
        prefix = MessagePrefix()
    prefix.sync(context.messages)
    first_position = prefix.first_position
    profile = calibration_profile(model.provider, model.id)
    # a call from before the latest compaction was sent the history the compaction replaced
    compaction = session.entry(context.compaction_entry_id) if context.compaction_entry_id else None
    after_line = compaction.line if compaction is not None else -1
    calls: list[tuple[int, int]] = []  # (position of the answer, reported input)
    for usage in reversed(prefix.usages.of(pi_reported_usages(session), profile)):  # newest first
        if usage.entry.line <= after_line:
            break  # this one and all older ones were sent what the compaction replaced
        answer = first_position.get(usage.entry.id)
        if answer is None:
            continue  # another branch's
        calls.append((answer, usage.input_tokens or 0))
        if len(calls) == OVERHEAD_CALLS:
            break
    if not calls:
        return None
    import statistics  # noqa: PLC0415 - 2-5 ms at start; only a session with usage needs it

    running = prefix.running
    overheads = [reported / max(ratio, 1.0) - running[position] for position, reported in calls]
    median = statistics.median(overheads)
    return max(0, math.ceil(median / OVERHEAD_STEP) * OVERHEAD_STEP)
