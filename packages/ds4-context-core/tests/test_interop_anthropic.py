"""Anthropic Messages payloads <-> canonical messages: round trips, tool linkage, cross-format export."""

from __future__ import annotations

import copy

import pytest

from ds4_context_core import ImageBlock, OpaqueProviderBlock, TextBlock, ToolCallBlock, ToolResultBlock
from ds4_context_core._exceptions import InteropFormatError
from ds4_context_core.history import build_runtime_history_snapshot, validate_runtime_history_snapshot
from ds4_context_core.interop import from_anthropic_messages, from_openai_chat, to_anthropic_messages

PAYLOAD = {
    "system": [{"type": "text", "text": "You are a careful coder."}],
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Compare these."},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
                },
                {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "spec"}},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Read both.", "signature": "c2ln"},
                {"type": "text", "text": "Reading both files."},
                {"type": "tool_use", "id": "toolu_a", "name": "read", "input": {"path": "a.py"}},
                {"type": "tool_use", "id": "toolu_b", "name": "read", "input": {"path": "b.py"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": "a = 1"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_b",
                    "content": [{"type": "text", "text": "b = "}, {"type": "text", "text": "2"}],
                    "is_error": True,
                },
                {"type": "text", "text": "Now compare."},
            ],
        },
        {"role": "assistant", "content": "They differ."},
    ],
}


def test_round_trip_is_lossless_and_does_not_touch_the_input():
    original = copy.deepcopy(PAYLOAD)
    canonical = from_anthropic_messages(PAYLOAD, session_id="s")
    assert original == PAYLOAD
    assert to_anthropic_messages(canonical) == PAYLOAD


def test_blocks_and_tool_results_map_to_canonical_messages():
    canonical = from_anthropic_messages(PAYLOAD, session_id="s")
    assert [m.role for m in canonical] == ["system", "user", "assistant", "tool", "user", "assistant"]
    user = canonical[1]
    assert user.blocks[:2] == (
        TextBlock(text="Compare these."),
        ImageBlock(mime_type="image/png", data="iVBORw0KGgo="),
    )
    assert user.blocks[2] == OpaqueProviderBlock(
        original_type="anthropic:document", value=PAYLOAD["messages"][0]["content"][2]
    )
    assistant = canonical[2]
    assert assistant.blocks[0].original_type == "anthropic:thinking"  # type: ignore[union-attr]  # signed: kept whole
    assert assistant.blocks[2:4] == (
        ToolCallBlock(id="toolu_a", name="read", arguments={"path": "a.py"}),
        ToolCallBlock(id="toolu_b", name="read", arguments={"path": "b.py"}),
    )
    results = canonical[3]
    assert results.blocks[:2] == (
        ToolResultBlock(tool_call_id="toolu_a", tool_name="read", content="a = 1"),
        ToolResultBlock(tool_call_id="toolu_b", tool_name="read", content="b = 2", is_error=True),
    )
    assert canonical[4].blocks[0] == TextBlock(text="Now compare.")
    snapshot = build_runtime_history_snapshot(
        runtime_id="interop", session_id="s", revision="r", project_root="/p", messages=canonical
    )
    assert validate_runtime_history_snapshot(snapshot) == ()
    (group,) = snapshot.tool_atomic_groups
    assert group.message_ids == ("s:000002", "s:000003")
    assert group.complete is True


def test_cache_control_is_a_transport_hint_and_is_not_kept():
    payload = {
        "system": "Hi",
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "long doc", "cache_control": {"type": "ephemeral"}}],
            }
        ],
    }
    canonical = from_anthropic_messages(payload, session_id="s")
    assert canonical[1].blocks[0] == TextBlock(text="long doc")
    assert to_anthropic_messages(canonical) == {
        "system": "Hi",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "long doc"}]}],
    }


def test_openai_parallel_results_become_one_user_turn_for_anthropic():
    chat = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Read a and b"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "read", "arguments": '{"path":"a"}'}},
                {"id": "c2", "type": "function", "function": {"name": "read", "arguments": '{"path":"b"}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "A"},
        {"role": "tool", "tool_call_id": "c2", "content": "B"},
        {"role": "user", "content": "and?"},
    ]
    payload = to_anthropic_messages(from_openai_chat(chat, session_id="s"))
    assert payload == {
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": "Read a and b"},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "c1", "name": "read", "input": {"path": "a"}},
                    {"type": "tool_use", "id": "c2", "name": "read", "input": {"path": "b"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "c1", "content": "A"},
                    {"type": "tool_result", "tool_use_id": "c2", "content": "B"},
                    {"type": "text", "text": "and?"},
                ],
            },
        ],
    }


def test_bare_message_lists_are_accepted():
    canonical = from_anthropic_messages([{"role": "user", "content": "hi"}], session_id="s", runtime_id=None)
    assert canonical[0].provenance.source == "pi-session"
    assert to_anthropic_messages(canonical) == {"messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(
    ("payload", "code", "path"),
    [
        ({"messages": [{"role": "system", "content": "x"}]}, "interop-role-unknown", "$.messages[0].role"),
        ({"messages": "nope"}, "interop-message-invalid", "$.messages"),
        ({"messages": [{"role": "user", "content": 5}]}, "interop-content-invalid", "$.messages[0].content"),
        (
            {"messages": [{"role": "user", "content": ["x"]}]},
            "interop-content-invalid",
            "$.messages[0].content[0]",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": 3}]}]},
            "interop-tool-result-invalid",
            "$.messages[0].content[0].tool_use_id",
        ),
        (
            {
                "messages": [
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "t", "name": None, "input": {}}],
                    }
                ]
            },
            "interop-tool-call-invalid",
            "$.messages[0].content[0].name",
        ),
    ],
)
def test_bad_payloads_have_codes_and_paths(payload, code, path):
    before = copy.deepcopy(payload)
    with pytest.raises(InteropFormatError) as caught:
        from_anthropic_messages(payload, session_id="s")
    assert (caught.value.code, caught.value.path) == (code, path)
    assert payload == before


def test_export_is_a_valid_sdk_message_list():
    pydantic = pytest.importorskip("pydantic")
    types = pytest.importorskip("anthropic.types")
    adapter = pydantic.TypeAdapter(list[types.MessageParam])
    adapter.validate_python(
        to_anthropic_messages(from_anthropic_messages(PAYLOAD, session_id="s"))["messages"]
    )
