"""Plans obey the structural rules of the wire format the host names (``destination=``)."""

import ds4_context_core as core
from ds4_context_core.interop import to_anthropic_messages, to_openai_chat
from ds4_context_core.planner import (
    PLAN_DIAGNOSTIC_CODES,
    PLAN_FALLBACK_CODES,
    PLAN_INCLUSION_REASONS,
    ContextPlanner,
    plan_context,
)


def _message(i, role, text):
    return core.CanonicalMessage(
        id=f"s:{i}",
        source_entry_id=str(i),
        role=role,
        blocks=(core.TextBlock(text=text),),
        provenance=core.Provenance(source="runtime-session", session_id="s", entry_id=str(i), runtime_id="r"),
    )


def _chat(count=240, size=600):
    history = [
        _message(i, "user" if i % 2 == 0 else "assistant", f"{i} " + "w" * (size if i % 2 else size // 3))
        for i in range(count - 1)
    ]
    history.append(_message(count - 1, "user", "and now?"))
    return history


MODEL = core.ModelDescriptor(provider="anthropic", id="claude", context_window=40_000, max_tokens=4_000)
# Without the task digest, which is a user message in front of the window whenever the cut moved, and
# with the compaction's low-water mark at the soft limit: the cut these histories were sized for.
NO_DIGEST = {"planner": {"task_digest": False, "compaction_low_water_ratio": 1.0}}


def test_with_the_task_digest_a_cut_plan_starts_with_the_user_and_needs_no_note():
    plan = plan_context(_chat(), model=MODEL, destination="anthropic")
    assert plan.ok
    assert plan.messages[0].role == "user"
    assert plan.messages[0].id == "ds4-supplement:ds4-core-task-digest"
    assert "structure-first-user-inserted" not in {d.code for d in plan.manifest.diagnostics}


def test_a_cut_that_leaves_an_assistant_first_gets_a_user_note_for_anthropic():
    history = _chat()
    plain = plan_context(history, model=MODEL, config=NO_DIGEST)
    assert plain.messages[0].role == "assistant"  # the cut this test is about
    plan = plan_context(history, model=MODEL, destination="anthropic", config=NO_DIGEST)
    assert plan.ok
    assert plan.messages[0].role == "user"
    assert plan.messages[0].blocks[0].text == "[earlier conversation omitted]"
    assert plan.messages[0].flags.synthetic
    # the repair only adds: every message of the plain plan is still sent, in order
    assert plan.messages[1:] == plain.messages
    assert plan.items[0].reason == "structure-repair"
    assert "structure-first-user-inserted" in {d.code for d in plan.manifest.diagnostics}
    assert plan.budget.total_tokens <= plan.budget.hard_limit
    # deterministic: the same plan twice gives the same bytes
    assert (
        plan_context(history, model=MODEL, destination="anthropic", config=NO_DIGEST).messages
        == plan.messages
    )


def test_a_plan_that_starts_with_the_user_is_left_alone_and_other_formats_get_no_note():
    history = _chat(size=674)
    plain = plan_context(history, model=MODEL, config=NO_DIGEST)
    assert plain.messages[0].role == "user"
    assert (
        plan_context(history, model=MODEL, destination="anthropic", config=NO_DIGEST).messages
        == plain.messages
    )
    chat = _chat()
    first = plan_context(chat, model=MODEL, destination="openai-chat", config=NO_DIGEST).messages[0]
    assert first.role == "assistant"


def test_the_planner_carries_the_destination_and_an_unknown_one_is_a_clear_code():
    planner = ContextPlanner()
    assert planner.plan(_chat(), model=MODEL, destination="anthropic").messages[0].role == "user"
    plan = plan_context(_chat(), model=MODEL, destination="gemini")
    # an unknown format is the planner's fallback: the newest whole units that fit, with the code
    details = [d.detail for d in plan.manifest.diagnostics if d.code == "fallback-fitted"]
    assert details
    assert details[0].startswith("destination-invalid:")
    assert "destination-invalid" in PLAN_FALLBACK_CODES
    assert "structure-repair" in PLAN_INCLUSION_REASONS
    assert "structure-first-user-inserted" in PLAN_DIAGNOSTIC_CODES


def _tool(i, role, *blocks):
    return core.CanonicalMessage(
        id=f"s:{i}",
        source_entry_id=str(i),
        role=role,
        blocks=blocks,
        provenance=core.Provenance(source="runtime-session", session_id="s", entry_id=str(i), runtime_id="r"),
    )


def _interrupted():
    """A call, a user message written before its result arrived, the result, then the request."""
    return [
        _message(0, "user", "look at a.py"),
        _tool(1, "assistant", core.ToolCallBlock(id="c1", name="read", arguments={"path": "a.py"})),
        _message(2, "user", "and b.py too"),
        _tool(3, "tool", core.ToolResultBlock(tool_call_id="c1", tool_name="read", content="x = 1")),
        _message(4, "user", "so?"),
    ]


def test_a_result_written_after_a_user_message_is_sent_right_after_its_call_in_every_format():
    history = _interrupted()
    for destination in ("anthropic", "openai-chat", "openai-responses"):
        plan = plan_context(history, model=MODEL, destination=destination)
        assert plan.ok
        assert [m.id for m in plan.messages] == ["s:0", "s:1", "s:3", "s:2", "s:4"]
    chat = to_openai_chat(plan.messages)
    assert [m["role"] for m in chat] == ["user", "assistant", "tool", "user", "user"]
    turns = to_anthropic_messages(plan.messages)["messages"]
    # Anthropic's turns alternate: the result and both user texts join one user turn, results first
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    assert [p["type"] for p in turns[2]["content"]] == ["tool_result", "text", "text"]
    assert [p.get("text") for p in turns[2]["content"][1:]] == ["and b.py too", "so?"]


def test_two_calling_turns_answered_by_one_message_join_into_one_chat_message():
    history = [
        _message(0, "user", "read both"),
        _tool(
            1,
            "assistant",
            core.TextBlock(text="first"),
            core.ToolCallBlock(id="a", name="read", arguments={}),
        ),
        _tool(
            2,
            "assistant",
            core.TextBlock(text="second"),
            core.ToolCallBlock(id="b", name="read", arguments={}),
        ),
        _tool(
            3,
            "tool",
            core.ToolResultBlock(tool_call_id="a", tool_name="read", content="A"),
            core.ToolResultBlock(tool_call_id="b", tool_name="read", content="B"),
        ),
        _message(4, "user", "thanks"),
    ]
    plan = plan_context(history, model=MODEL, destination="openai-chat")
    assert plan.ok
    assert plan.messages == tuple(history)
    chat = to_openai_chat(plan.messages)
    assert [m["role"] for m in chat] == ["user", "assistant", "tool", "tool", "user"]
    assert [c["id"] for c in chat[1]["tool_calls"]] == ["a", "b"]
    assert chat[1]["content"] == [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}]


def test_a_fitted_fallback_obeys_the_destination_too():
    history = _chat(size=650)
    pins = [m.id for m in history[:200]]  # far more than the pins' share of the hard limit
    plain = plan_context(history, model=MODEL, pins=pins)
    assert "pins-exceed-cap" in plain.manifest.diagnostics[-1].detail  # the fallback this test is about
    assert plain.messages[0].role == "assistant"
    plan = plan_context(history, model=MODEL, pins=pins, destination="anthropic")
    codes = [d.code for d in plan.manifest.diagnostics]
    assert "fallback-fitted" in codes
    assert "structure-first-user-inserted" in codes
    assert plan.messages[0].role == "user"
    assert plan.messages[0].flags.synthetic
    assert plan.messages[1:] == plain.messages
    assert plan.items[0].reason == "structure-repair"
    assert plan.budget.total_tokens == sum(item.tokens for item in plan.items)
    assert plan.budget.total_tokens <= plan.budget.hard_limit


def test_the_native_fallback_sends_each_tool_unit_as_one_run():
    history = _interrupted()
    history[2] = _message(2, "user", "z" * 40_000)  # pinned, it passes the pins' share: a fallback
    for destination in ("openai-chat", None):
        plan = plan_context(history, model=MODEL, pins=["s:2"], destination=destination)
        assert (plan.fallback.mode, plan.fallback.code) == ("native", "pins-exceed-cap")
        assert [m.id for m in plan.messages] == ["s:0", "s:1", "s:3", "s:2", "s:4"]


def test_a_shape_the_destination_cannot_carry_is_caught_by_the_self_check_and_nothing_is_sent():
    history = [
        _tool(
            0, "user", core.TextBlock(text="run it"), core.ToolCallBlock(id="u", name="bash", arguments={})
        ),
        _tool(1, "tool", core.ToolResultBlock(tool_call_id="u", tool_name="bash", content="ok")),
        _message(2, "user", "and?"),
    ]
    assert plan_context(history, model=MODEL).ok  # no destination named: nothing to check against
    plan = plan_context(history, model=MODEL, destination="anthropic")  # tool_use in a user turn
    assert plan.messages == ()
    assert plan.fallback.mode == "blocked"
    assert plan.fallback.code == "plan-validation-failed"
    assert "anthropic" in plan.fallback.detail
