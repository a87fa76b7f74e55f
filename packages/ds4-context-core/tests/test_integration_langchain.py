"""The LangChain integration against real langchain-core messages."""

from __future__ import annotations

import sys

import pytest

from ds4_context_core import MissingExtraError, ModelDescriptor, ToolResultBlock
from ds4_context_core.history import build_runtime_history_snapshot, validate_runtime_history_snapshot
from ds4_context_core.integrations.langchain import (
    from_langchain,
    plan_langchain,
    planning_middleware,
    to_langchain,
    trim_langchain,
)

lc = pytest.importorskip("langchain_core.messages")


def _long_history(turns: int) -> list:
    messages = [lc.SystemMessage("You are a careful coding agent.", id="sys")]
    for turn in range(turns):
        messages.append(lc.HumanMessage(f"Step {turn}: read the file again", id=f"h{turn}"))
        calls = [
            {"id": f"c{turn}a", "name": "read", "args": {"path": f"src/m{turn}.py"}},
            {"id": f"c{turn}b", "name": "read", "args": {"path": f"tests/t{turn}.py"}},
        ]
        messages.append(lc.AIMessage("", tool_calls=calls, id=f"a{turn}"))
        messages.append(lc.ToolMessage("x = 1\n" * 400, tool_call_id=f"c{turn}a", id=f"r{turn}a"))
        messages.append(lc.ToolMessage("boom", tool_call_id=f"c{turn}b", status="error", id=f"r{turn}b"))
    messages.append(lc.HumanMessage("Now fix the failing test.", id="last"))
    return messages


def test_round_trip_keeps_tool_pairs_errors_and_the_system_prompt():
    original = _long_history(3)
    history = from_langchain(original)
    snapshot = build_runtime_history_snapshot(
        runtime_id="interop", session_id="langchain", revision="1", project_root="/p", messages=history
    )
    assert validate_runtime_history_snapshot(snapshot) == ()
    assert all(group.complete for group in snapshot.tool_atomic_groups)
    result = history[4].blocks[0]
    assert type(result) is ToolResultBlock
    assert result.is_error
    back = to_langchain(history)
    assert [type(m).__name__ for m in back] == [type(m).__name__ for m in original]
    assert [getattr(m, "tool_call_id", None) for m in back] == [
        getattr(m, "tool_call_id", None) for m in original
    ]
    assert [getattr(m, "status", None) for m in back] == [getattr(m, "status", None) for m in original]
    assert back[0].content == original[0].content


def test_a_long_history_is_planned_in_one_call_with_pairs_kept_and_originals_returned():
    original = _long_history(60)
    model = ModelDescriptor(provider="openai", id="gpt-x", context_window=32_000, max_tokens=4_096)
    planned = plan_langchain(original, model=model)
    assert planned.plan.ok
    sent = planned.messages
    assert len(sent) < len(original)
    assert sent[0] is original[0]  # the system prompt, always first
    assert sent[-1] is original[-1]  # the current request, the caller's own object
    kept_ids = {id(m) for m in original}
    assert any(id(m) in kept_ids for m in sent[1:-1])
    # Every tool call sent has every result sent, and no result without its call.
    calls = {call["id"] for m in sent if getattr(m, "tool_calls", None) for call in m.tool_calls}
    results = {m.tool_call_id for m in sent if getattr(m, "type", None) == "tool"}
    assert calls == results
    assert trim_langchain(original, model=model) == sent


def test_without_langchain_the_extra_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "langchain_core.messages", None)
    with pytest.raises(MissingExtraError) as caught:
        from_langchain([])
    assert caught.value.extra == "langchain"
    assert 'pip install "ds4-context-core[langchain]"' in str(caught.value)


def test_the_agent_middleware_plans_every_model_call_of_a_real_agent():
    agents = pytest.importorskip("langchain.agents")
    middleware = pytest.importorskip("langchain.agents.middleware")
    fake = pytest.importorskip("langchain_core.language_models.fake_chat_models")
    seen: list[list] = []

    class Recorder(middleware.AgentMiddleware):
        """Runs inside ours: what it sees is what the model is sent."""

        def wrap_model_call(self, request, handler):
            seen.append(list(request.messages))
            return handler(request)

    model = ModelDescriptor(provider="openai", id="gpt-x", context_window=32_000, max_tokens=4_096)
    agent = agents.create_agent(
        fake.GenericFakeChatModel(messages=iter([lc.AIMessage("done")])),
        system_prompt="You are a careful coding agent.",
        middleware=[planning_middleware(model=model), Recorder()],
    )
    history = _long_history(60)[1:]  # the agent holds its system prompt itself
    result = agent.invoke({"messages": history})
    assert result["messages"][-1].content == "done"
    sent = seen[-1]
    assert len(sent) < len(history)
    assert sent[-1] is history[-1]
    calls = {call["id"] for m in sent if getattr(m, "tool_calls", None) for call in m.tool_calls}
    results = {m.tool_call_id for m in sent if getattr(m, "type", None) == "tool"}
    assert calls == results


def test_without_langchain_agents_the_middleware_names_its_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "langchain.agents.middleware", None)
    model = ModelDescriptor(provider="openai", id="gpt-x", context_window=32_000, max_tokens=4_096)
    with pytest.raises(MissingExtraError) as caught:
        planning_middleware(model=model)
    assert caught.value.extra == "langchain-agents"
