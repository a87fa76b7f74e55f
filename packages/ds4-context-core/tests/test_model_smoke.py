import msgspec
import pytest

import ds4_context_core as core


def _message(entry: str, *blocks: core.CanonicalBlock, role: str = "assistant") -> core.CanonicalMessage:
    return core.CanonicalMessage(
        id=f"s:{entry}",
        source_entry_id=entry,
        role=role,  # type: ignore[arg-type]
        blocks=blocks,
        provenance=core.Provenance(source="runtime-session", session_id="s", entry_id=entry, runtime_id="r"),
    )


def test_camel_case_wire_names_round_trip_byte_stably():
    raw = (
        b'{"id":"s:a","sourceEntryId":"a","role":"tool","blocks":[{"type":"toolResult","toolCallId":"t",'
        b'"toolName":"read","content":"ok","isError":true}],"provenance":{"source":"runtime-session",'
        b'"sessionId":"s","entryId":"a","runtimeId":"r"},"flags":{"atomic":true}}'
    )
    message = msgspec.json.decode(raw, type=core.CanonicalMessage)
    assert message.blocks[0] == core.ToolResultBlock(
        tool_call_id="t", tool_name="read", content="ok", is_error=True
    )
    assert msgspec.json.encode(message) == raw


def test_parallel_calls_form_one_group_and_missing_result_is_incomplete():
    call = _message(
        "a",
        core.ToolCallBlock(id="t1", name="read", arguments={}),
        core.ToolCallBlock(id="t2", name="ls", arguments={}),
    )
    first = _message("b", core.ToolResultBlock(tool_call_id="t1", tool_name="read", content="x"), role="tool")
    (group,) = core.build_canonical_tool_atomic_groups([call, first])
    assert group.message_ids == ("s:a", "s:b")
    assert group.tool_call_ids == ("t1", "t2")
    assert group.complete is False
    second = _message("c", core.ToolResultBlock(tool_call_id="t2", tool_name="ls", content="y"), role="tool")
    (group,) = core.build_canonical_tool_atomic_groups([call, first, second])
    assert group.complete is True
    assert group.id.startswith("runtime-tool-group:")
    assert len(group.id) == len("runtime-tool-group:") + 16


def test_messages_are_immutable():
    message = _message("a", core.TextBlock(text="hi"), role="user")
    with pytest.raises(AttributeError):
        message.role = "assistant"  # type: ignore[misc]
