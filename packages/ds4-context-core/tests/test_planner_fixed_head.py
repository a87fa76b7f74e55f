"""The fixed head: at a compaction the plan keeps the previous plan's first messages byte for byte (the
oldest history kept, sent before the task digest) and moves the cut after them, while the budget allows."""

from __future__ import annotations

from _messages import message

import ds4_context_core as core
from ds4_context_core.planner import ContextPlanner, plan_context

DIGEST_ID = "ds4-supplement:ds4-core-task-digest"


def user(entry, text):
    return message(entry, "user", (core.TextBlock(text=text),))


def edit(entry, call_id, path):
    arguments = {"path": path, "oldText": "a", "newText": "b"}
    block = core.ToolCallBlock(id=call_id, name="edit", arguments=arguments)
    return message(entry, "assistant", (core.TextBlock(text=f"editing {path}"), block))


def run(entry, call_id, command):
    block = core.ToolCallBlock(id=call_id, name="bash", arguments={"command": command})
    return message(entry, "assistant", (block,))


def result(entry, call_id, text, name):
    return message(entry, "tool", (core.ToolResultBlock(tool_call_id=call_id, tool_name=name, content=text),))


def session(turns, *, steps=3):
    """Turns of a coding session: a request, then test runs with long output and one edit each."""
    history = []
    for turn in range(turns):
        history.append(user(f"u{turn}", f"turn {turn}: fix module {turn}"))
        for step in range(steps):
            key = f"{turn}-{step}"
            history.append(run(f"a{key}", f"c{key}", f"pytest tests/test_{turn}_{step}.py"))
            history.append(result(f"r{key}", f"c{key}", f"line {key}\n" * 120, "bash"))
        history.append(edit(f"e{turn}", f"d{turn}", f"src/m{turn}.py"))
        history.append(result(f"s{turn}", f"d{turn}", "done", "edit"))
    return history


def calls_of(history):
    """Every prefix a host sends: a model call before each assistant message, and after the last."""
    ends = [end for end, m in enumerate(history) if m.role == "assistant" and end > 0]
    return [*ends, len(history)]


def head_of(plan):
    return [m for m, item in zip(plan.messages, plan.items, strict=True) if item.reason == "fixed-head"]


MODEL = core.ModelDescriptor(provider="p", id="m", context_window=24_000, max_tokens=2_000)


def test_a_compaction_keeps_the_previous_plans_head_and_sends_the_digest_after_it():
    history = session(40)
    planner = ContextPlanner()
    previous = None
    compactions = 0
    for end in calls_of(history):
        plan = planner.plan(history[:end], model=MODEL)
        assert plan.ok
        assert plan.budget.total_tokens <= plan.budget.hard_limit
        if plan.manifest.compaction is not None and previous is not None and previous.state.dropped_messages:
            compactions += 1
            head = head_of(plan)
            assert head, "a compaction that sends no fixed head"
            # the head leads both plans, byte for byte, and only the digest comes between it and the window
            assert list(previous.messages[: len(head)]) == head
            assert plan.messages[len(head)].id == DIGEST_ID
            assert plan.manifest.shared_prefix_messages >= len(head)
            head_tokens = sum(item.tokens for item in plan.items[: len(head)])
            assert plan.manifest.shared_prefix_tokens >= head_tokens > 0
        previous = plan
    assert compactions >= 3


def test_the_head_is_the_oldest_history_and_every_changed_file_stays_named():
    history = session(40)
    planner = ContextPlanner()
    for end in calls_of(history):
        plan = planner.plan(history[:end], model=MODEL)
    assert plan.state.dropped_messages > 0
    head = head_of(plan)
    assert head[0] is history[0]  # the original request, verbatim
    assert [m.id for m in head] == [m.id for m in history[: len(head)]]
    text = "\n".join(
        block.text if isinstance(block, core.TextBlock) else str(getattr(block, "arguments", ""))
        for m in plan.messages
        for block in m.blocks
    )
    for turn in range(40):  # cut between the head and the window: the digest names them
        assert f"src/m{turn}.py" in text


def test_a_head_the_budget_no_longer_allows_goes_and_the_plan_still_fits():
    history = session(30)
    planner = ContextPlanner()
    wide = core.ModelDescriptor(provider="p", id="m", context_window=64_000, max_tokens=2_000)
    for end in calls_of(history):
        plan = planner.plan(history[:end], model=wide)
    held = sum(item.tokens for item in plan.items if item.reason == "fixed-head")
    narrow = core.ModelDescriptor(provider="p", id="m", context_window=12_000, max_tokens=2_000)
    smaller = planner.plan([*history, user("late", "and now the docs")], model=narrow)
    assert smaller.ok
    assert smaller.budget.total_tokens <= smaller.budget.hard_limit
    assert held > smaller.budget.hard_limit // 4  # more than the narrow window's head may take
    assert not head_of(smaller)


def test_without_a_head_ratio_or_without_core_s_digest_the_cut_moves_from_the_front():
    history = session(40)
    for config in ({"planner": {"fixed_head_ratio": 0.0}}, {"planner": {"task_digest": False}}):
        planner = ContextPlanner(config=config)
        for end in calls_of(history):
            plan = planner.plan(history[:end], model=MODEL)
            assert plan.ok
            assert not head_of(plan)
        assert plan.state.dropped_messages > 0
        # nothing older than the first history message kept is sent (a host's digest stands for it)
        kept = [item.original_index for item in plan.items if item.original_index is not None]
        assert min(kept) >= plan.state.dropped_messages


def test_a_long_single_turn_keeps_its_request_first_at_every_compaction():
    history = [user("u0", "port the whole package")]
    for step in range(200):
        history.append(run(f"a{step}", f"c{step}", f"make step{step}"))
        history.append(result(f"r{step}", f"c{step}", f"out {step}\n" * 150, "bash"))
    planner = ContextPlanner()
    previous = None
    compactions = 0
    for end in calls_of(history):
        plan = planner.plan(history[:end], model=MODEL)
        assert plan.ok
        assert plan.messages[0] is history[0]
        if plan.manifest.compaction is not None and previous is not None and previous.state.dropped_messages:
            compactions += 1
            assert plan.manifest.shared_prefix_tokens > 0
        previous = plan
    assert compactions >= 2


def test_a_cold_plan_has_no_head_and_a_retry_from_an_older_state_gives_the_same_plan():
    history = session(40)
    cold = plan_context(history, model=MODEL)
    assert cold.ok
    assert cold.state.dropped_messages > 0
    assert not head_of(cold)
    plans = []
    state = None
    for end in calls_of(history):
        plan = plan_context(history[:end], model=MODEL, state=state)
        plans.append((end, state, plan))
        state = plan.state
    assert head_of(plans[-1][2])
    # a host that retries a call with the state it had gets the very same plan, head and all
    for end, older, plan in plans[-40:]:
        assert plan_context(history[:end], model=MODEL, state=older).encode() == plan.encode()
