"""The task digest: a cut session keeps its original request, instructions, files and tools in the plan."""

from __future__ import annotations

import msgspec
import pytest
from _long_session import FIRST_REQUEST, pi_message, write_long_session

from ds4_context_core import ModelDescriptor
from ds4_context_core.planner import plan_context
from ds4_context_engine.commands import ContextWorkspace, context_restore
from ds4_context_engine.commands._digest import (
    TASK_DIGEST_ID,
    TASK_DIGEST_MAX_CHARS,
    cut_messages,
    task_digest,
)
from ds4_context_engine.pi import append_pi_entries

MODEL = ModelDescriptor(provider="openai", id="gpt-4.1-mini", context_window=32_000, max_tokens=2_000)
EDIT = pi_message(
    "assistant",
    [
        {
            "type": "toolCall",
            "id": "call-edit",
            "name": "Edit",
            "arguments": {"file_path": "src/budget.py", "old": "round(round(x))", "new": "round(x)"},
        }
    ],
)
EDITED = pi_message(
    "toolResult", [{"type": "text", "text": "ok"}], toolCallId="call-edit", toolName="Edit", isError=False
)
INSTRUCTION = pi_message("user", "Keep the public API of budget.py unchanged while you fix it.")


@pytest.fixture
def session_path(tmp_path):
    return write_long_session(tmp_path / "s.jsonl", early=[INSTRUCTION, EDIT, EDITED])


def _digest_of(plan):
    items = [(item, message) for item, message in zip(plan.items, plan.messages, strict=True)]
    # the engine's digest (core's own task digest, on by default, is another summary item)
    engine_id = "ds4-supplement:" + TASK_DIGEST_ID
    found = [(item, message) for item, message in items if item.kind == "summary" and message.id == engine_id]
    return found[0] if found else (None, None)


def test_a_cut_plan_starts_with_the_task_state_it_cut(session_path):
    with ContextWorkspace.open(session_path, no_store=True, model=MODEL) as workspace:
        plan = workspace.plan()
        messages = workspace.context.messages
    item, message = _digest_of(plan)
    assert item is not None
    assert plan.items[0] is item  # summaries go in front of the history
    text = message.blocks[0].text
    cut = cut_messages(messages, plan)
    assert text.startswith(f"[task state from the {len(cut)} earlier messages this context leaves out]")
    assert f"Original request: {FIRST_REQUEST}" in text
    assert "- Keep the public API of budget.py unchanged while you fix it." in text
    assert "Files changed: src/budget.py" in text
    assert "Files read: p0.py, p1.py" in text
    assert "Tool calls: Edit 1, bash 1, read " in text
    first_user = next(m for m in messages if m.role == "user")
    assert first_user.id in item.source_ids
    assert plan.manifest.planned_tokens <= plan.budget.hard_limit


def test_the_digest_is_cache_stable_across_turns(session_path):
    with ContextWorkspace.open(session_path, no_store=True, model=MODEL) as workspace:
        first = workspace.plan()
        for turn in range(3):
            append_pi_entries(
                session_path,
                [
                    pi_message("assistant", [{"type": "text", "text": f"Done with turn {turn}."}]),
                    pi_message("user", f"Next, turn {turn + 1}: one more small change."),
                ],
            )
            workspace.refresh()
            later = workspace.plan()
            assert _digest_of(later)[1] == _digest_of(first)[1]
            assert later.manifest.shared_prefix_tokens > 0.8 * first.manifest.planned_tokens
            first = later


def test_no_cut_or_switched_off_means_no_digest(tmp_path, session_path):
    short = write_long_session(tmp_path / "short.jsonl", steps=2)
    with ContextWorkspace.open(short, no_store=True, model=MODEL) as workspace:
        assert _digest_of(workspace.plan()) == (None, None)
    with ContextWorkspace.open(session_path, no_store=True, model=MODEL, task_digest=False) as workspace:
        assert _digest_of(workspace.plan()) == (None, None)


def test_private_and_marked_requests_stay_out_of_the_digest(tmp_path):
    marked = pi_message("user", "[ds4:sensitive]the client is Initech[/ds4:sensitive], fix their build")
    path = write_long_session(tmp_path / "private.jsonl", first_request="Fix the build.", early=[marked])
    with ContextWorkspace.open(path, no_store=True, model=MODEL) as workspace:
        plan = workspace.plan()
        messages = list(workspace.context.messages)
    text = _digest_of(plan)[1].blocks[0].text
    assert "Initech" not in text
    first_user = next(m for m in messages if m.role == "user")
    flagged = msgspec.structs.replace(
        first_user, flags=msgspec.structs.replace(first_user.flags, local_only=True)
    )
    hidden = [flagged if m is first_user else m for m in messages]
    digest = task_digest(hidden, plan_context(hidden, model=MODEL))
    assert digest is not None
    assert "Fix the build." not in digest.text
    assert first_user.id not in digest.source_ids


def test_a_huge_cut_is_summarised_within_the_size_limit(tmp_path):
    chatter = [pi_message("user", f"instruction {n}: " + "please be careful " * 40) for n in range(60)]
    path = write_long_session(tmp_path / "big.jsonl", early=chatter)
    with ContextWorkspace.open(path, no_store=True, model=MODEL) as workspace:
        plan = workspace.plan()
    text = _digest_of(plan)[1].blocks[0].text
    assert len(text) <= TASK_DIGEST_MAX_CHARS
    assert "more not shown)" in text
    assert "instruction 0:" in text  # the earliest instructions (constraints) are kept
    assert "instruction 10:" not in text
    assert f"Now step {_last_cut_step(plan)}:" in text  # and so are the latest cut ones


def _last_cut_step(plan):
    """The step number of the newest user message the plan cut (the first kept one minus one)."""
    kept = [message for message in plan.messages if message.role == "user"]
    steps = [
        int(m.blocks[0].text.split()[2].rstrip(":")) for m in kept if m.blocks[0].text.startswith("Now step ")
    ]
    return min(steps) - 1


def test_restore_shows_the_requests_a_digest_quotes(session_path):
    with ContextWorkspace.open(session_path, no_store=True, model=MODEL) as workspace:
        plan = workspace.plan()
        item, _ = _digest_of(plan)
        restored = context_restore(workspace, item.message_id)
    assert [message.message_id for message in restored.messages] == list(item.source_ids)
    assert restored.messages[0].text == FIRST_REQUEST
    assert all(message.role == "user" for message in restored.messages)
