"""OpenAI Chat Completions and Responses shapes <-> canonical messages: round trips and tool linkage."""

from __future__ import annotations

import copy
import json

import pytest

from ds4_context_core import (
    ImageBlock,
    OpaqueProviderBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from ds4_context_core._exceptions import InteropFormatError
from ds4_context_core.history import build_runtime_history_snapshot, validate_runtime_history_snapshot
from ds4_context_core.interop import (
    INTEROP_ERROR_CODES,
    RAW_ARGUMENTS_KEY,
    from_anthropic_messages,
    from_openai_chat,
    from_openai_responses,
    to_openai_chat,
    to_openai_responses,
)

PNG = "data:image/png;base64,iVBORw0KGgo="

CHAT = [
    {"role": "developer", "content": "You are terse."},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is in these files?"},
            {"type": "image_url", "image_url": {"url": PNG}},
        ],
    },
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_a",
                "type": "function",
                "function": {"name": "read", "arguments": '{"path":"a.py"}'},
            },
            {
                "id": "call_b",
                "type": "function",
                "function": {"name": "read", "arguments": '{"path":"b.py"}'},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "call_a", "content": "print('a')"},
    {"role": "tool", "tool_call_id": "call_b", "content": [{"type": "text", "text": "print('b')"}]},
    {"role": "assistant", "content": "Both print a letter.", "refusal": None},
    {"role": "user", "content": "Thanks", "name": "ada"},
    {
        "role": "user",
        "content": [{"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}],
    },
]


def snapshot_of(messages):
    return build_runtime_history_snapshot(
        runtime_id="interop", session_id="s", revision="r", project_root="/p", messages=messages
    )


def test_chat_round_trip_is_lossless():
    original = copy.deepcopy(CHAT)
    canonical = from_openai_chat(CHAT, session_id="s")
    assert original == CHAT  # the input is not modified
    assert to_openai_chat(canonical) == CHAT


def test_chat_maps_to_canonical_blocks_and_links_results_to_calls():
    canonical = from_openai_chat(CHAT, session_id="s")
    assert [m.role for m in canonical] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "user",
        "user",
    ]
    assert canonical[0].provenance.original_role == "developer"
    assert canonical[1].blocks[:2] == (
        TextBlock(text="What is in these files?"),
        ImageBlock(mime_type="image/png", data="iVBORw0KGgo="),
    )
    assert canonical[2].blocks == (
        ToolCallBlock(id="call_a", name="read", arguments={"path": "a.py"}),
        ToolCallBlock(id="call_b", name="read", arguments={"path": "b.py"}),
    )
    assert canonical[4].blocks[0] == ToolResultBlock(
        tool_call_id="call_b", tool_name="read", content="print('b')"
    )
    assert canonical[7].blocks[0] == OpaqueProviderBlock(
        original_type="openai-chat:input_audio", value=CHAT[7]["content"][0]
    )
    assert [m.id for m in canonical][:2] == ["s:000000", "s:000001"]
    assert canonical[2].flags.atomic is True
    snapshot = snapshot_of(canonical)
    assert validate_runtime_history_snapshot(snapshot) == ()
    (group,) = snapshot.tool_atomic_groups
    assert group.message_ids == ("s:000002", "s:000003", "s:000004")
    assert group.complete is True


def test_ids_are_stable_when_the_history_grows():
    short = from_openai_chat(CHAT[:3], session_id="s", entry_prefix="chat-")
    longer = from_openai_chat(CHAT, session_id="s", entry_prefix="chat-")
    assert longer[:3] == short
    assert short[0].id == "s:chat-000000"


def test_chat_arguments_that_are_not_an_object_survive_verbatim():
    broken = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "run", "arguments": '{"cmd": "ls'}}
            ],
        }
    ]
    (message,) = from_openai_chat(broken, session_id="s")
    assert message.blocks[0].arguments == {RAW_ARGUMENTS_KEY: '{"cmd": "ls'}  # type: ignore[union-attr]
    assert to_openai_chat([message]) == broken


@pytest.mark.parametrize(
    ("messages", "code", "path"),
    [
        ([{"role": "function", "name": "f", "content": "x"}], "interop-role-unknown", "$[0].role"),
        (["not a message"], "interop-message-invalid", "$[0]"),
        ([{"role": "user", "content": 42}], "interop-content-invalid", "$[0].content"),
        (
            [{"role": "user", "content": [{"type": "text", "text": 1}]}],
            "interop-content-invalid",
            "$[0].content[0].text",
        ),
        ([{"role": "tool", "content": "x"}], "interop-tool-result-invalid", "$[0].tool_call_id"),
        (
            [
                {
                    "role": "assistant",
                    "tool_calls": [
                        {"id": 7, "type": "function", "function": {"name": "f", "arguments": "{}"}}
                    ],
                }
            ],
            "interop-tool-call-invalid",
            "$[0].tool_calls[0].id",
        ),
        ([{"role": "assistant", "tool_calls": "nope"}], "interop-tool-call-invalid", "$[0].tool_calls"),
    ],
)
def test_chat_bad_input_has_codes_and_paths(messages, code, path):
    before = copy.deepcopy(messages)
    with pytest.raises(InteropFormatError) as caught:
        from_openai_chat(messages, session_id="s")
    assert caught.value.code == code
    assert code in INTEROP_ERROR_CODES
    assert caught.value.path == path
    assert messages == before


RESPONSES = [
    {"role": "system", "content": "Be brief."},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "List the repo"}]},
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "I should call ls."}]},
    {
        "type": "function_call",
        "call_id": "call_1",
        "name": "ls",
        "arguments": '{"path":"."}',
        "id": "fc_1",
        "status": "completed",
    },
    {"type": "function_call", "call_id": "call_2", "name": "ls", "arguments": '{"path":"src"}'},
    {"type": "function_call_output", "call_id": "call_1", "output": "README.md\nsrc"},
    {"type": "function_call_output", "call_id": "call_2", "output": "main.py"},
    {"role": "assistant", "content": "Two entries at the top."},
    {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_image", "image_url": PNG, "detail": "auto"}],
    },
]


def test_responses_round_trip_is_lossless():
    canonical = from_openai_responses(RESPONSES, session_id="s")
    assert to_openai_responses(canonical) == RESPONSES


def test_responses_parallel_calls_share_one_message_and_group():
    canonical = from_openai_responses(RESPONSES, session_id="s")
    assert [m.role for m in canonical] == [
        "system",
        "user",
        "assistant",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "user",
    ]
    assert canonical[2].blocks[0] == OpaqueProviderBlock(
        original_type="openai-responses:reasoning", value=RESPONSES[2]
    )
    calls = canonical[3].blocks[:2]
    assert calls == (
        ToolCallBlock(id="call_1", name="ls", arguments={"path": "."}),
        ToolCallBlock(id="call_2", name="ls", arguments={"path": "src"}),
    )
    assert canonical[5].blocks[0] == ToolResultBlock(tool_call_id="call_2", tool_name="ls", content="main.py")
    assert canonical[7].blocks[0] == ImageBlock(mime_type="image/png", data="iVBORw0KGgo=")
    snapshot = snapshot_of(canonical)
    assert validate_runtime_history_snapshot(snapshot) == ()
    (group,) = snapshot.tool_atomic_groups
    assert group.tool_call_ids == ("call_1", "call_2")
    assert group.complete is True


def test_responses_bad_items_have_codes():
    for items, code in [
        ([{"type": "message", "role": "robot", "content": "x"}], "interop-role-unknown"),
        ([{"content": "no type, no role"}], "interop-message-invalid"),
        ([{"type": "function_call", "name": "f", "arguments": "{}"}], "interop-tool-call-invalid"),
        ([{"type": "function_call_output", "call_id": "c", "output": 3}], "interop-tool-result-invalid"),
    ]:
        with pytest.raises(InteropFormatError) as caught:
            from_openai_responses(items, session_id="s")
        assert caught.value.code == code


ANTHROPIC = {
    "system": "Plan carefully.",
    "messages": [
        {"role": "user", "content": "Read a.py"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Use the read tool.", "signature": "sig=="},
                {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a.py"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "x = 1", "is_error": True}
            ],
        },
    ],
}


def test_anthropic_history_can_be_sent_to_openai_chat_with_linkage_kept():
    canonical = from_anthropic_messages(ANTHROPIC, session_id="s")
    chat = to_openai_chat(canonical)
    assert chat == [
        {"role": "system", "content": "Plan carefully."},
        {"role": "user", "content": "Read a.py"},
        {
            "role": "assistant",
            "content": None,  # the signed thinking block belongs to Anthropic and is not sent
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "read", "arguments": '{"path":"a.py"}'},
                }
            ],
        },
        # Chat has no error flag: the model still reads that the call failed.
        {"role": "tool", "tool_call_id": "toolu_1", "content": "Error: x = 1"},
    ]
    with pytest.raises(InteropFormatError) as caught:
        to_openai_chat(canonical, strict=True)
    assert caught.value.code == "interop-block-unsupported"
    responses = to_openai_responses(canonical)
    assert [item.get("type", "message") for item in responses] == [
        "message",
        "message",
        "function_call",
        "function_call_output",
    ]
    assert responses[2]["call_id"] == responses[3]["call_id"] == "toolu_1"
    # Plain thinking (no provider signature) becomes a ThinkingBlock, which Chat has no place for.
    (thoughtful,) = from_anthropic_messages(
        [
            {
                "role": "assistant",
                "content": [{"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": "ok"}],
            }
        ],
        session_id="s",
    )
    assert thoughtful.blocks[0] == ThinkingBlock(thinking="hmm")
    assert to_openai_chat([thoughtful]) == [{"role": "assistant", "content": "ok"}]


def test_exports_are_valid_sdk_request_shapes():
    pydantic = pytest.importorskip("pydantic")
    chat_types = pytest.importorskip("openai.types.chat")
    responses_types = pytest.importorskip("openai.types.responses")
    chat_adapter = pydantic.TypeAdapter(list[chat_types.ChatCompletionMessageParam])
    chat_adapter.validate_python(to_openai_chat(from_openai_chat(CHAT, session_id="s")))
    responses_adapter = pydantic.TypeAdapter(responses_types.ResponseInputParam)
    responses_adapter.validate_python(to_openai_responses(from_openai_responses(RESPONSES, session_id="s")))
    json.dumps(to_openai_chat(from_openai_chat(CHAT, session_id="s")))  # plain JSON values only
