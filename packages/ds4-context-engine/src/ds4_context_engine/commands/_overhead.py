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
import statistics
from typing import Final

from ds4_context_core import ModelDescriptor
from ds4_context_core.planner import fast_chars_v1
from ds4_context_engine.pi import PiContext, PiSession, pi_reported_usages

from ._calibrate import calibration_profile

__all__ = ["OVERHEAD_CALLS", "OVERHEAD_STEP", "usage_overhead"]

OVERHEAD_CALLS: Final = 16
OVERHEAD_STEP: Final = 256


def usage_overhead(
    session: PiSession, context: PiContext, model: ModelDescriptor, ratio: float
) -> int | None:
    """The overhead measured from the newest calls of ``model`` in ``context``, or ``None`` without any."""
    first_position: dict[str, int] = {}
    for position, message in enumerate(context.messages):
        first_position.setdefault(message.source_entry_id, position)
    profile = calibration_profile(model.provider, model.id)
    # a call from before the latest compaction was sent the history the compaction replaced
    compaction = session.entry(context.compaction_entry_id) if context.compaction_entry_id else None
    after_line = compaction.line if compaction is not None else -1
    calls: list[tuple[int, int]] = []  # (position of the answer, reported input)
    for usage in reversed(pi_reported_usages(session)):
        answer = first_position.get(usage.entry.id)
        if (
            answer is None
            or usage.entry.line <= after_line
            or not usage.complete
            or not usage.input_tokens
            or usage.provider is None
            or usage.model is None
            or calibration_profile(usage.provider, usage.model) != profile
        ):
            continue
        calls.append((answer, usage.input_tokens))
        if len(calls) == OVERHEAD_CALLS:
            break
    if not calls:
        return None
    running = [0]
    for message in context.messages[: max(position for position, _ in calls)]:
        running.append(running[-1] + fast_chars_v1(message))
    overheads = [reported / max(ratio, 1.0) - running[position] for position, reported in calls]
    median = statistics.median(overheads)
    return max(0, math.ceil(median / OVERHEAD_STEP) * OVERHEAD_STEP)
