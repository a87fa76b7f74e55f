"""The compaction window: the units after the cut, what they cost, and the compaction that moves the cut.

Between compactions every plan extends the previous one byte for byte: the cut, trims and receipts are
sticky. A compaction runs when the plan would pass the soft limit (or when far history was skipped) and
frees at least a batch of tokens at once: layer 1 trims (``_trim``), layer 2 receipts (``_receipts``),
then the cut advances over the oldest units. The fixed head (the oldest units kept, mandatory while the
budget allows it) is never trimmed or dropped: the cut moves after it (``compact_after_head``), so a
compaction keeps the plan's prefix up to the digest.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from typing import Final

from ._common import compaction_goal, hash16, head_budget, original_unit_tokens
from ._decisions import Decisions, MandatoryReason, PlanInputs, Supplement, Window
from ._interrupted import interruptible, repair_interrupted
from ._mandatory import FIXED_HEAD, head_tokens, release_head
from ._receipts import make_receipts
from ._supplements import drop_supplements
from ._trim import trim_results, trim_turn
from ._types import CompactionReport, GateCount
from ._verdicts import judge_results

_MAX_LISTED_IDS: Final = 64
# Content older than this many compaction goals cannot survive a compaction.
PRE_CUT_FACTOR: Final = 1.5


def skip_far_history(inputs: PlanInputs, decisions: Decisions) -> int:
    """Move the cut past history that cannot survive any compaction; return how many messages.

    When the span since the cut passes the soft limit a compaction is certain, and anything older than
    ``PRE_CUT_FACTOR`` compaction goals is dropped by it anyway, so finding that point by bisection
    keeps a cold plan of a long history from walking all of it twice.
    """
    index, size, cut = inputs.index, inputs.size, decisions.cut
    limit = PRE_CUT_FACTOR * max(compaction_goal(inputs), 1)
    # Skipping is only right when a compaction is certain: the span since the cut passes the soft limit
    # too (a low-water goal sits far below it, and the steps in between must append, not compact).
    trigger = max(limit, inputs.budget.soft_limit)
    if index.known_from <= cut and index.cumulative[size] - index.cumulative[cut] <= trigger:
        return 0  # the usual re-plan: everything since the cut is estimated and fits
    saved = sum(index.token(p) - trim.tokens for p, trim in decisions.trims.items())
    saved += sum(receipt.original_tokens - receipt.tokens for receipt in decisions.receipts.values())
    # Estimate newest first, only until the answer is certain: all the way down to the cut, or
    # until even with every earlier saving the newer messages alone pass the limit.
    index.ensure_known(cut, over=trigger + saved)
    cumulative = index.cumulative
    known = max(cut, index.known_from)
    if known == cut:
        span = cumulative[size] - cumulative[cut]
        if span <= trigger or span - saved <= trigger:
            return 0
    # Earlier decisions only shrink the window, so the raw bisection point is a safe lower bound.
    # Every position below ``known`` has more than ``limit`` after it, so the search starts there.
    target = bisect.bisect_left(cumulative, cumulative[size] - limit, lo=known)
    # Never past the turn in progress: its results are trimmed by the compaction, not skipped unseen.
    current = index.current_request()
    if current is not None:
        target = min(target, current + 1)
    parent = index.parent
    while target < size and parent[target] >= 0 and index.find(target) != target:
        target += 1
    while target < size and decisions.receipt_of.get(target, target) != target:
        target += 1
    if target <= cut:
        return 0
    decisions.cut = target
    decisions.forget_before(target)
    return target - cut


def _unit_tokens_from(
    inputs: PlanInputs, cut: int, decisions: Decisions
) -> tuple[list[int], dict[int, int], list[int]]:
    """One pass from the cut: complete unit roots, their untrimmed tokens, and the stragglers.

    An interrupted unit (``_interrupted``) counts as complete, at the tokens of its repaired copies,
    which go to ``decisions.interrupted``."""
    index = inputs.index
    parent, find, incomplete = index.parent, index.find, index.incomplete
    tokens, members_of, cumulative = index.tokens, index.unit_members, index.cumulative
    units: list[int] = []
    unit_tokens: dict[int, int] = {}
    stragglers: list[int] = []
    for position in range(cut, inputs.size):
        up = parent[position]
        if up >= 0:
            root = up if parent[up] == up else find(position)
            if root != position:
                if root < cut:
                    stragglers.append(position)
                continue
            group = members_of(root)
            if root in incomplete:
                if not interruptible(index, root):
                    continue
                copies = repair_interrupted(inputs, root)
                decisions.interrupted.update(copies)
                decisions.interrupted_roots.add(root)
                unit_tokens[root] = sum(copies[p].tokens if p in copies else index.token(p) for p in group)
                units.append(position)
                continue
            last = group[-1]
            if last - position + 1 == len(group):  # contiguous, the usual case
                unit_tokens[root] = cumulative[last + 1] - cumulative[position]
            else:
                unit_tokens[root] = sum(tokens[p] for p in group)
        else:
            unit_tokens[position] = tokens[position]
        units.append(position)
    return units, unit_tokens, stragglers


def _release_mandatory(inputs: PlanInputs, decisions: Decisions, mandatory: Mapping[int, object]) -> None:
    """Mandatory units are always sent verbatim: forget layer-1/2 decisions that touch them."""
    unit_of = inputs.index.unit_of
    for key, receipt in list(decisions.receipts.items()):
        if any(root in mandatory for root in receipt.roots):
            del decisions.receipts[key]
            for root in receipt.roots:
                decisions.receipt_of.pop(root, None)
    for position in list(decisions.trims):
        if unit_of(position) in mandatory:
            del decisions.trims[position]


def open_window(
    inputs: PlanInputs,
    decisions: Decisions,
    mandatory: Mapping[int, MandatoryReason],
    supplements: list[Supplement],
) -> Window:
    """The window at the current cut, with the planned tokens of each unit in ``decisions.unit_tokens``
    and the window's usage (fixed overhead, mandatory units before the cut, supplements, window)."""
    index = inputs.index
    cut = decisions.cut
    units, unit_tokens, stragglers = _unit_tokens_from(inputs, cut, decisions)
    _release_mandatory(inputs, decisions, mandatory)
    tokens, unit_of, receipt_of = index.tokens, index.unit_of, decisions.receipt_of
    for position, trim in decisions.trims.items():
        root = unit_of(position)
        if root in unit_tokens and root not in receipt_of:
            unit_tokens[root] -= tokens[position] - trim.tokens
    for key, receipt in decisions.receipts.items():
        for root in receipt.roots:
            if root in unit_tokens:
                unit_tokens[root] = receipt.tokens if root == key else 0
    oversized = decisions.oversized
    elided = 0 if oversized is None else tokens[oversized.position] - oversized.tokens
    if oversized is not None and oversized.position in unit_tokens:
        unit_tokens[oversized.position] -= elided
        elided = 0
    decisions.unit_tokens = unit_tokens
    head = decisions.head
    if head and head[-1] < cut:
        # The fixed head's tokens are known; a head unit mandatory on its own is counted as such.
        outside_tokens = decisions.head_tokens - elided
        outside_tokens += sum(
            original_unit_tokens(index, root)
            for root, why in mandatory.items()
            if root < cut and why is not FIXED_HEAD
        )
        outside_tokens -= sum(
            original_unit_tokens(index, root) for root in head if mandatory[root] is not FIXED_HEAD
        )
    else:
        outside_tokens = sum(original_unit_tokens(index, root) for root in mandatory if root < cut) - elided
    usage = (
        inputs.budget.fixed_tokens
        + outside_tokens
        + sum(supplement.tokens for supplement in supplements)
        + sum(unit_tokens.values())
    )
    return Window(units=units, stragglers=stragglers, supplements=supplements, usage=usage)


def stragglers_after(inputs: PlanInputs, cut: int) -> list[int]:
    """Positions after ``cut`` that belong to units rooted before it."""
    parent, find = inputs.index.parent, inputs.index.find
    found = []
    for position in range(cut, inputs.size):
        up = parent[position]
        if up >= 0 and (up if parent[up] == up else find(position)) < cut:
            found.append(position)
    return found


def _pre_cut(
    decisions: Decisions, window: Window, mandatory: Mapping[int, object], stop: int, goal: int
) -> int:
    """How many of the oldest units (at most ``stop``) a compaction drops before pruning: those older
    than the content that can survive it, so pruning stays O(window). Their tokens leave ``window.usage``."""
    units, unit_tokens = window.units, decisions.unit_tokens
    start = 0
    window_left = window.usage
    while start < stop and window_left > PRE_CUT_FACTOR * max(goal, 1):
        if units[start] not in mandatory:
            window_left -= unit_tokens[units[start]]
        start += 1
    start = decisions.align_to_receipt(units, start)
    window.usage -= sum(unit_tokens[units[i]] for i in range(start) if units[i] not in mandatory)
    return start


def _advance_cut(
    inputs: PlanInputs,
    decisions: Decisions,
    window: Window,
    mandatory: Mapping[int, object],
    *,
    start: int,
    tail_start: int,
    goal: int,
    trimmed_ids: list[str],
) -> tuple[int, int]:
    """Advance over the oldest non-mandatory units, whole receipts at a time, until the usage is at the
    goal. The recent tail is entered only when the hard limit demands it, and only after the
    supplements are gone. Returns the new first unit and the count of messages dropped from ``start``."""
    units, unit_tokens, members_of = window.units, decisions.unit_tokens, inputs.index.unit_members
    hard_limit = inputs.budget.hard_limit
    current = inputs.index.current_request()
    turn = bisect.bisect_right(units, current if current is not None else inputs.size)
    turn_trimmed = False
    position = start
    dropped = 0
    while position < len(units):
        if position < tail_start and window.usage <= goal:
            break
        if position >= tail_start:
            if window.usage <= hard_limit:
                break
            if window.supplements or window.reserve:
                drop_supplements(inputs, decisions, window)
                continue
        if position >= turn and not turn_trimmed:
            # The cut reaches the turn in progress: trim its newest results before dropping any.
            turn_trimmed = True
            target = goal if position < tail_start else hard_limit
            need = window.usage - target
            window.usage -= trim_turn(
                inputs, decisions, units[position:], need=need, skip=mandatory, trimmed_ids=trimmed_ids
            )
            continue
        root = units[position]
        key = decisions.receipt_of.get(root)
        span = len(decisions.receipts[key].roots) if key is not None and key == root else 1
        for member in units[position : position + span]:
            if member not in mandatory:
                window.usage -= unit_tokens[member]
                dropped += len(members_of(member))
        position += span
    return position, dropped


def compact(
    inputs: PlanInputs,
    decisions: Decisions,
    window: Window,
    mandatory: Mapping[int, MandatoryReason],
    jumped: int,
) -> None:
    """One compaction: trim, receipt, then cut, down to the goal; records the compaction report."""
    index = inputs.index
    pruning = inputs.pruning
    cut = decisions.cut
    # A mandatory unit (a pin) the skip passed is in the window already, in front: the skipped span's
    # sum counts it once more, and it is never dropped. (Few: the loop is over the pins, not the span.)
    passed = [root for root in mandatory if cut - jumped <= root < cut] if jumped else []
    before = window.usage - window.reserve
    before -= sum(index.token(member) for root in passed for member in index.unit_members(root))
    if cut - jumped >= index.known_from:
        before += index.cumulative[cut] - index.cumulative[cut - jumped]
    else:  # the skipped history was never estimated: the manifest adds it when it is read
        decisions.skipped_span = (cut - jumped, cut)
    goal = compaction_goal(inputs)
    decisions.compactions += 1
    messages = inputs.messages
    compaction_id = "ds4-compaction:" + hash16(
        messages[0].id if messages else "", decisions.compactions, cut, inputs.size
    )
    units = window.units
    # The recent tail a compaction spares is at most what the goal leaves for the window: a tail
    # ceiling above the room (12,000 tokens in a small window) would stop every compaction at the
    # hard limit, so the cut would move again at the very next step.
    outside = window.usage - sum(decisions.unit_tokens[root] for root in units)
    ceiling = min(inputs.budget.recent_tail_ceiling, max(0, goal - outside))
    tail_start = decisions.tail_start(units, ceiling)
    # The pre-cut stops before the recent tail and before the turn in progress (trimmed, never skipped).
    current = index.current_request()
    turn = bisect.bisect_right(units, current) if current is not None else len(units)
    start = _pre_cut(decisions, window, mandatory, min(tail_start, turn), goal)
    gates: dict[str, int] = {}
    trimmed_ids: list[str] = []
    receipt_ids: list[str] = []
    region = [
        root for root in units[start:tail_start] if root not in mandatory and root not in decisions.receipt_of
    ]
    need = window.usage - goal
    if pruning.enabled and need > 0 and region:
        verdicts = judge_results(inputs, region, units[tail_start:], gates)
        saved = trim_results(inputs, decisions, verdicts, need=need, gates=gates, trimmed_ids=trimmed_ids)
        if pruning.receipts and need - saved > 0:
            saved += make_receipts(
                inputs,
                decisions,
                region,
                units=units,
                verdicts=verdicts,
                need=need - saved,
                gates=gates,
                receipt_ids=receipt_ids,
                compaction_id=compaction_id,
            )
        window.usage -= saved
    members_of = index.unit_members
    dropped = jumped - sum(len(members_of(root)) for root in passed)
    dropped += sum(len(members_of(units[i])) for i in range(start) if units[i] not in mandatory)
    position, advanced = _advance_cut(
        inputs,
        decisions,
        window,
        mandatory,
        start=start,
        tail_start=tail_start,
        goal=goal,
        trimmed_ids=trimmed_ids,
    )
    dropped += advanced
    if window.usage > inputs.budget.hard_limit and (window.supplements or window.reserve):
        drop_supplements(inputs, decisions, window)
    kept = units[position:]
    # Mandatory units passed by the cut stay in the plan (emitted in front of the window).
    decisions.cut = max(decisions.cut, kept[0] if kept else inputs.size)
    decisions.forget_before(decisions.cut)
    decisions.compaction = CompactionReport(
        compaction_id=compaction_id,
        dry_run=pruning.dry_run,
        tokens_before=before,
        tokens_after=window.usage,
        goal_tokens=goal,
        trimmed_message_ids=tuple(trimmed_ids[:_MAX_LISTED_IDS]),
        receipt_ids=tuple(receipt_ids),
        dropped_messages=dropped,
        dropped_supplements=tuple(decisions.dropped_supplements),
        gate_exclusions=tuple(GateCount(gate=gate, count=count) for gate, count in sorted(gates.items())),
    )
    window.units = kept
    window.stragglers = stragglers_after(inputs, decisions.cut)


def compact_after_head(
    inputs: PlanInputs,
    decisions: Decisions,
    window: Window,
    mandatory: dict[int, MandatoryReason],
    jumped: int,
) -> None:
    """One compaction that keeps the fixed head (mandatory units, which no compaction touches) and
    moves the cut after it; the head goes first when the budget no longer allows it."""
    if decisions.head and head_tokens(decisions) > head_budget(inputs):
        window.usage -= release_head(inputs, decisions, mandatory)  # a smaller budget than it had
    compact(inputs, decisions, window, mandatory, jumped)
    if decisions.head and window.usage > inputs.budget.soft_limit:
        # The head left too little to compact into: the next step would compact again.
        window.usage -= release_head(inputs, decisions, mandatory)
    _cut_after_head(inputs, decisions, window)


def _cut_after_head(inputs: PlanInputs, decisions: Decisions, window: Window) -> None:
    """Move the cut past the fixed head when a compaction left it inside: the head leads the plan in
    front of the digest (``_emit``), which stands for everything before the cut."""
    head = decisions.head
    if not head or decisions.cut > head[-1]:
        return
    last = head[-1]
    rest = [root for root in window.units if root > last]
    decisions.cut = max(decisions.cut, rest[0] if rest else inputs.size)
    decisions.forget_before(decisions.cut)
    window.units = rest
    window.stragglers = stragglers_after(inputs, decisions.cut)
