"""``supplement_reserve``: a host that rebuilds its supplements for the cut a compaction chose, and plans
again from the same state, gets that compaction, not a plan that fits at the old cut because the rebuilt
supplements came out smaller."""

from __future__ import annotations

import itertools

import pytest
from _messages import message

import ds4_context_core as core
from ds4_context_core.planner import ContextPlanner, SupplementalItem, plan_context

MODEL = core.ModelDescriptor(provider="local", id="m", context_window=40_000, max_tokens=4_000)
BIG = SupplementalItem(id="cut-notes", kind="summary", text="old finding, kept for the model. " * 240)
SMALL = SupplementalItem(id="cut-notes", kind="summary", text="one old finding.")


def turn(number):
    return [
        message(f"u{number}", "user", [core.TextBlock(text=f"Step {number}: " + "what next? " * 40)]),
        message(f"a{number}", "assistant", [core.TextBlock(text=f"Done {number}. " + "it works. " * 40)]),
    ]


CONVERSATION = list(itertools.chain.from_iterable(turn(n) for n in range(400)))


def history(turns):
    """What the host has at the model call of turn ``turns``: every turn before it and its request."""
    return CONVERSATION[: 2 * turns + 1]


def planned(messages, state, extra, **options):
    return plan_context(
        messages,
        model=MODEL,
        state=state,
        supplemental=extra,
        calibration_ratio=1.0,
        task_digest=False,
        **options,
    )


def compacts(plan):
    return plan.manifest.compaction is not None


def supplement_tokens(plan):
    return sum(item.tokens for item in plan.items if item.message_id == "ds4-supplement:cut-notes")


def first_compaction():
    """(state before it, number of turns, the plan with BIG carried) at the first step whose plan with
    BIG compacts, planned turn by turn as a host does."""
    state = None
    for turns in range(20, 400):
        plan = planned(history(turns), state, (BIG,))
        if compacts(plan) and state is not None:
            return state, turns, plan
        state = plan.state
    raise AssertionError("no compaction")


def test_smaller_rebuilt_supplements_planned_in_the_held_room_give_the_same_cut():
    state, turns, carried = first_compaction()
    big = supplement_tokens(carried)
    # without the reserve, the smaller supplements fit at the old cut: the cut the host rebuilt them
    # for is not the plan's, and the next step would compact with them again
    plain = planned(history(turns), state, (SMALL,))
    assert not compacts(plain)
    assert plain.state.dropped_messages == state.dropped_messages
    held = planned(history(turns), state, (SMALL,), supplement_reserve=big)
    assert compacts(held)
    assert held.state.dropped_messages == carried.state.dropped_messages
    # the room is held only for the decision: the plan sends the small supplement, and is that smaller
    assert supplement_tokens(held) < big
    assert held.budget.total_tokens == carried.budget.total_tokens - big + supplement_tokens(held)
    assert held.manifest.compaction.tokens_after == held.budget.total_tokens
    assert held.manifest.compaction.tokens_before == carried.manifest.compaction.tokens_before - (
        big - supplement_tokens(held)
    )


def test_the_quiet_steps_after_it_extend_the_plan_with_the_rebuilt_supplements():
    state, turns, _ = first_compaction()
    previous = planned(history(turns), state, (BIG,))
    previous = planned(history(turns), state, (SMALL,), supplement_reserve=supplement_tokens(previous))
    quiet = 0
    for more in range(turns + 1, turns + 8):
        reserve = supplement_tokens(previous)
        plan = planned(history(more), previous.state, (SMALL,), supplement_reserve=reserve)
        if compacts(plan):
            break
        quiet += 1
        # the whole previous request, the rebuilt supplement in front included, then what was appended
        assert plan.messages[: len(previous.messages)] == previous.messages
        previous = plan
    assert quiet >= 3


def test_a_reserve_at_or_below_what_the_supplements_take_changes_nothing():
    state, turns, carried = first_compaction()
    for reserve in (0, 1, supplement_tokens(carried)):
        plan = planned(history(turns), state, (BIG,), supplement_reserve=reserve)
        assert plan.encode() == carried.encode()


def test_a_reserve_past_what_supplements_can_take_is_held_at_their_ceilings():
    messages = history(120)
    plan = planned(messages, None, (SMALL,), supplement_reserve=10**9)
    budget = plan.budget
    most = (
        budget.memory_ceiling
        + budget.summary_ceiling
        + budget.retrieved_history_ceiling
        + budget.project_snippet_ceiling
    )
    assert plan.ok
    assert plan.encode() == planned(messages, None, (SMALL,), supplement_reserve=most).encode()
    assert plan.budget.total_tokens <= plan.budget.hard_limit - most + supplement_tokens(plan)
    assert supplement_tokens(plan) > 0  # the held room goes before any supplement
    assert not [e for e in plan.manifest.exclusions if e.reason == "supplement-over-budget"]
    assert plan.messages[-1] is messages[-1]


@pytest.mark.parametrize("reserve", [-1, 1.5, "100", True, None])
def test_an_unusable_reserve_is_reported_and_planned_without(reserve):
    messages = history(60)
    plan = planned(messages, None, (SMALL,), supplement_reserve=reserve)
    assert plan.ok
    assert "supplement-reserve-invalid" in [d.code for d in plan.manifest.diagnostics]
    assert plan.messages == planned(messages, None, (SMALL,)).messages


def test_the_reusable_planner_passes_it_on():
    _, turns, carried = first_compaction()
    planner = ContextPlanner(config={"planner": {"task_digest": False}})

    def step(number, extra, **options):
        return planner.plan(
            history(number),
            model=MODEL,
            supplemental=extra,
            calibration_ratio=1.0,
            **options,
        )

    for number in range(20, turns):
        step(number, (BIG,))
    plan = step(turns, (SMALL,), supplement_reserve=supplement_tokens(carried))
    assert compacts(plan)
    assert plan.state.dropped_messages == carried.state.dropped_messages
