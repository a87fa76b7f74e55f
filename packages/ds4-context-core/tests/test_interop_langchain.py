"""The LangChain adoption path from docs/core/interop.md, run against real langchain-core messages."""

from __future__ import annotations

import pytest

from ds4_context_core import TextBlock, ToolCallBlock, ToolResultBlock
from ds4_context_core.history import build_runtime_history_snapshot, validate_runtime_history_snapshot
from ds4_context_core.interop import from_openai_chat, to_openai_chat

messages_module = pytest.importorskip("langchain_core.messages")


def test_langchain_history_round_trips_through_canonical_messages():
    lc = messages_module
    original = [
        lc.SystemMessage("Be brief."),
        lc.HumanMessage("Read a and b"),
        lc.AIMessage(
            "",
            tool_calls=[
                {"id": "c1", "name": "read", "args": {"path": "a"}},
                {"id": "c2", "name": "read", "args": {"path": "b"}},
            ],
        ),
        lc.ToolMessage("A", tool_call_id="c1"),
        lc.ToolMessage("B", tool_call_id="c2"),
        lc.AIMessage("Done."),
    ]
    history = from_openai_chat(lc.convert_to_openai_messages(original), session_id="lc")
    assert history[2].blocks[:2] == (
        TextBlock(text=""),
        ToolCallBlock(id="c1", name="read", arguments={"path": "a"}),
    )
    assert history[4].blocks[0] == ToolResultBlock(tool_call_id="c2", tool_name="read", content="B")
    snapshot = build_runtime_history_snapshot(
        runtime_id="interop", session_id="lc", revision="1", project_root="/p", messages=history
    )
    assert validate_runtime_history_snapshot(snapshot) == ()
    back = lc.convert_to_messages(to_openai_chat(history))
    assert [type(m).__name__ for m in back] == [type(m).__name__ for m in original]
    assert back[2].tool_calls == [
        {"name": "read", "args": {"path": "a"}, "id": "c1", "type": "tool_call"},
        {"name": "read", "args": {"path": "b"}, "id": "c2", "type": "tool_call"},
    ]
    assert [m.content for m in back] == [m.content for m in original]
