"""Plans obey the structural rules of the wire format the host names (``destination=``)."""

import ds4_context_core as core
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


def test_a_cut_that_leaves_an_assistant_first_gets_a_user_note_for_anthropic():
    history = _chat()
    plain = plan_context(history, model=MODEL)
    assert plain.messages[0].role == "assistant"  # the cut this test is about
    plan = plan_context(history, model=MODEL, destination="anthropic")
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
    assert plan_context(history, model=MODEL, destination="anthropic").messages == plan.messages


def test_a_plan_that_starts_with_the_user_is_left_alone_and_other_formats_get_no_note():
    history = _chat(size=674)
    plain = plan_context(history, model=MODEL)
    assert plain.messages[0].role == "user"
    assert plan_context(history, model=MODEL, destination="anthropic").messages == plain.messages
    chat = _chat()
    assert plan_context(chat, model=MODEL, destination="openai-chat").messages[0].role == "assistant"


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
