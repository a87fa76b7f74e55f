"""The pydantic-ai integration against real pydantic-ai messages and a real Agent run."""

from __future__ import annotations

import functools
import sys

import anyio
import pytest

from ds4_context_core import MissingExtraError, ModelDescriptor, ToolCallBlock, ToolResultBlock
from ds4_context_core.history import build_runtime_history_snapshot, validate_runtime_history_snapshot
from ds4_context_core.integrations.pydantic_ai import (
    from_pydantic_ai,
    history_processor,
    plan_pydantic_ai,
    to_pydantic_ai,
)

pa = pytest.importorskip("pydantic_ai.messages")


def _history(turns: int) -> list:
    messages: list = [
        pa.ModelRequest(
            parts=[
                pa.SystemPromptPart(content="You are a careful coding agent."),
                pa.UserPromptPart(content="Fix it."),
            ]
        )
    ]
    for turn in range(turns):
        messages.append(
            pa.ModelResponse(
                parts=[
                    pa.TextPart(content=f"Reading step {turn}."),
                    pa.ToolCallPart(
                        tool_name="read", args={"path": f"src/m{turn}.py"}, tool_call_id=f"c{turn}a"
                    ),
                    pa.ToolCallPart(tool_name="run", args='{"cmd": "pytest"}', tool_call_id=f"c{turn}b"),
                ]
            )
        )
        messages.append(
            pa.ModelRequest(
                parts=[
                    pa.ToolReturnPart(tool_name="read", content="x = 1\n" * 400, tool_call_id=f"c{turn}a"),
                    pa.ToolReturnPart(
                        tool_name="run", content="exit 1", tool_call_id=f"c{turn}b", outcome="failed"
                    ),
                ]
            )
        )
    messages.append(pa.ModelResponse(parts=[pa.TextPart(content="Done.")]))
    messages.append(pa.ModelRequest(parts=[pa.UserPromptPart(content="Now the last test.")]))
    return messages


def test_messages_convert_with_pairs_retries_as_errors_and_back():
    original = _history(2)
    history = from_pydantic_ai(original)
    assert [m.role for m in history[:3]] == ["system", "user", "assistant"]
    assert history[2].blocks[1] == ToolCallBlock(id="c0a", name="read", arguments={"path": "src/m0.py"})
    assert history[2].blocks[2] == ToolCallBlock(id="c0b", name="run", arguments={"cmd": "pytest"})
    result = history[3].blocks[1]
    assert type(result) is ToolResultBlock
    assert result.is_error
    snapshot = build_runtime_history_snapshot(
        runtime_id="interop", session_id="pydantic-ai", revision="1", project_root="/p", messages=history
    )
    assert validate_runtime_history_snapshot(snapshot) == ()
    assert all(group.complete for group in snapshot.tool_atomic_groups)
    back = to_pydantic_ai(history)
    assert [type(m).__name__ for m in back] == [type(m).__name__ for m in original]
    assert [[p.part_kind for p in m.parts] for m in back] == [
        [p.part_kind for p in m.parts] for m in original
    ]


def test_a_long_history_is_planned_with_originals_and_pairs_kept():
    original = _history(60)
    model = ModelDescriptor(provider="openai", id="gpt-x", context_window=32_000, max_tokens=4_096)
    sent, plan = plan_pydantic_ai(original, model=model)
    assert plan.ok
    assert len(sent) < len(original)
    first = sent[0]
    assert first.parts[0].part_kind == "system-prompt"  # the system prompt survives the cut
    assert sent[-1] is original[-1]
    assert any(message is candidate for message in sent[1:-1] for candidate in original)
    calls = {p.tool_call_id for m in sent for p in m.parts if p.part_kind == "tool-call"}
    answers = {p.tool_call_id for m in sent for p in m.parts if p.part_kind == "tool-return"}
    assert calls == answers


def test_the_history_processor_runs_inside_a_real_agent_and_the_model_sees_a_planned_history():
    agent_module = pytest.importorskip("pydantic_ai")
    capabilities = pytest.importorskip("pydantic_ai.capabilities")
    function_model = pytest.importorskip("pydantic_ai.models.function")
    seen: list[list] = []

    def answer(messages, info):
        seen.append(messages)
        return pa.ModelResponse(parts=[pa.TextPart(content="done")])

    model = ModelDescriptor(provider="openai", id="gpt-x", context_window=32_000, max_tokens=4_096)
    agent = agent_module.Agent(
        function_model.FunctionModel(answer),
        capabilities=[capabilities.ProcessHistory(history_processor(model=model))],
    )
    # anyio.run closes its event loop; run_sync leaves one open for a later test's loop to orphan.
    result = anyio.run(functools.partial(agent.run, "And now?", message_history=_history(60)))
    assert result.output == "done"
    sent = seen[-1]
    assert len(sent) < 60 * 2 + 3
    calls = {p.tool_call_id for m in sent for p in m.parts if p.part_kind == "tool-call"}
    answers = {p.tool_call_id for m in sent for p in m.parts if p.part_kind == "tool-return"}
    assert calls == answers
    assert sent[0].parts[0].part_kind == "system-prompt"


def test_without_pydantic_ai_the_extra_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "pydantic_ai.messages", None)
    with pytest.raises(MissingExtraError) as caught:
        from_pydantic_ai([])
    assert caught.value.extra == "pydantic-ai"
