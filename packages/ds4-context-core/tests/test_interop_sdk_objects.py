"""SDK objects in, every shape paired: built with the real OpenAI and Anthropic SDK types."""

from __future__ import annotations

import json

import msgspec
import pytest

from ds4_context_core import InteropFormatError, ToolCallBlock, ToolResultBlock
from ds4_context_core.history import build_runtime_history_snapshot, validate_runtime_history_snapshot
from ds4_context_core.interop import (
    RAW_ARGUMENTS_KEY,
    from_anthropic_messages,
    from_openai_chat,
    from_openai_responses,
    to_anthropic_messages,
    to_openai_chat,
    to_openai_responses,
)

anthropic_types = pytest.importorskip("anthropic.types")
chat_types = pytest.importorskip("openai.types.chat")
responses_types = pytest.importorskip("openai.types.responses")
custom_call_module = pytest.importorskip("openai.types.chat.chat_completion_message_custom_tool_call")


def _assert_complete(history) -> None:
    """Every call has its result in the snapshot's atomic groups: nothing would be sent orphaned."""
    snapshot = build_runtime_history_snapshot(
        runtime_id="interop", session_id="s", revision="1", project_root="/p", messages=history
    )
    assert validate_runtime_history_snapshot(snapshot) == ()
    assert snapshot.tool_atomic_groups
    assert all(group.complete for group in snapshot.tool_atomic_groups)


def _anthropic_turn(dump):
    """An assistant turn whose content blocks come from the SDK, dumped as a host would."""
    blocks = [
        anthropic_types.TextBlock(type="text", text="Reading it."),
        anthropic_types.ToolUseBlock(type="tool_use", id="toolu_1", name="read", input={"path": "a.py"}),
    ]
    content = [dump(block) for block in blocks]
    return {
        "messages": [
            {"role": "user", "content": "Read a.py"},
            {"role": "assistant", "content": content},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "x = 1"}],
            },
        ]
    }


@pytest.mark.parametrize(
    "dump",
    [
        lambda block: block.model_dump(),
        lambda block: block,
        lambda block: block.model_dump(exclude_none=True),
    ],
    ids=["plain model_dump with None fields", "the SDK objects themselves", "model_dump without None"],
)
def test_anthropic_sdk_blocks_pair_with_their_results(dump):
    history = from_anthropic_messages(_anthropic_turn(dump), session_id="s")
    assert ToolCallBlock(id="toolu_1", name="read", arguments={"path": "a.py"}) in history[1].blocks
    assert type(history[2].blocks[0]) is ToolResultBlock
    _assert_complete(history)
    sent = to_anthropic_messages(history)["messages"]
    call = sent[1]["content"][1]
    assert call == {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a.py"}}
    assert sent[2]["content"][0]["tool_use_id"] == "toolu_1"


def test_anthropic_tool_use_keys_we_do_not_model_travel_with_the_call():
    payload = {
        "messages": [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "t1", "name": "run", "input": {"a": None}, "caller": {"x": 1}}
                ],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]},
        ]
    }
    history = from_anthropic_messages(payload, session_id="s")
    _assert_complete(history)
    assert to_anthropic_messages(history) == payload  # the null inside the input is the caller's, kept


def test_chat_completion_message_objects_are_accepted_and_argument_bytes_survive():
    assistant = chat_types.ChatCompletionMessage.model_validate(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "read", "arguments": '{"path": "b.py"}'},
                }
            ],
        }
    )
    messages = [
        {"role": "user", "content": "read b"},
        assistant,
        {"role": "tool", "tool_call_id": "c1", "content": "B"},
    ]
    history = from_openai_chat(messages, session_id="s")
    _assert_complete(history)
    sent = to_openai_chat(history)
    # The provider cached these exact bytes: re-serialising to {"path":"b.py"} would miss the cache.
    assert sent[1]["tool_calls"][0]["function"]["arguments"] == '{"path": "b.py"}'
    assert sent[2] == {"role": "tool", "tool_call_id": "c1", "content": "B"}


def test_changed_arguments_are_written_fresh_not_from_the_stale_text():
    messages = [
        {"role": "user", "content": "read b"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "read", "arguments": '{"n": true}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "B"},
    ]
    history = list(from_openai_chat(messages, session_id="s"))
    old_call = history[1].blocks[0]
    assert isinstance(old_call, ToolCallBlock)
    # 1 == True in Python; the text a provider reads must still change.
    new_call = ToolCallBlock(id=old_call.id, name=old_call.name, arguments={"n": 1})
    history[1] = msgspec.structs.replace(history[1], blocks=(new_call, *history[1].blocks[1:]))
    assert to_openai_chat(history)[1]["tool_calls"][0]["function"]["arguments"] == '{"n":1}'


def test_chat_custom_tool_calls_pair_with_their_outputs_and_round_trip():
    call = custom_call_module.ChatCompletionMessageCustomToolCall.model_validate(
        {"id": "c1", "type": "custom", "custom": {"name": "apply_patch", "input": "*** Begin Patch"}}
    )
    assistant = {"role": "assistant", "content": None, "tool_calls": [call]}
    messages = [
        {"role": "user", "content": "patch it"},
        assistant,
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
    ]
    history = from_openai_chat(messages, session_id="s")
    assert history[1].blocks[0] == ToolCallBlock(
        id="c1", name="apply_patch", arguments={RAW_ARGUMENTS_KEY: "*** Begin Patch"}
    )
    _assert_complete(history)
    sent = to_openai_chat(history)
    assert sent[1]["tool_calls"] == [call.model_dump(mode="json", exclude_none=True)]


def test_responses_output_objects_pair_custom_and_function_calls_and_keep_reasoning_whole():
    output = [
        responses_types.ResponseReasoningItem(
            id="rs_1", summary=[], type="reasoning", encrypted_content="enc"
        ),
        responses_types.ResponseFunctionToolCall(
            id="fc_1", call_id="call_1", name="read", arguments='{"path": "a.py"}', type="function_call"
        ),
        responses_types.ResponseCustomToolCall(
            call_id="call_2", name="apply_patch", input="*** Begin Patch", type="custom_tool_call"
        ),
    ]
    items = [
        {"role": "user", "content": "go"},
        *output,
        {"type": "function_call_output", "call_id": "call_1", "output": "A"},
        {"type": "custom_tool_call_output", "call_id": "call_2", "output": "patched"},
    ]
    history = from_openai_responses(items, session_id="s")
    _assert_complete(history)
    sent = to_openai_responses(history)
    assert sent == [
        {"role": "user", "content": "go"},
        *(o.model_dump(mode="json", exclude_none=True) for o in output),
        *items[4:],
    ]


@pytest.mark.parametrize(
    "part",
    [
        {
            "type": "output_text",
            "text": "cited",
            "annotations": [
                {"type": "url_citation", "url": "https://x", "title": "x", "start_index": 0, "end_index": 5}
            ],
        },
        {
            "type": "output_text",
            "text": "hi",
            "annotations": [],
            "logprobs": [{"token": "hi", "bytes": [104, 105], "logprob": -0.1, "top_logprobs": []}],
        },
        {"type": "refusal", "refusal": "I can't help with that."},
    ],
    ids=["citations", "logprobs", "refusal"],
)
def test_a_responses_message_whose_only_part_is_opaque_keeps_its_message_wrapper(part):
    message = responses_types.ResponseOutputMessage.model_validate(
        {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed", "content": [part]}
    )
    items = [{"role": "user", "content": "q"}, message]
    sent = to_openai_responses(from_openai_responses(items, session_id="s"))
    assert sent[1] == message.model_dump(mode="json", exclude_none=True)
    assert sent[1]["type"] == "message"
    assert sent[1]["content"] == [part]


def test_a_reasoning_item_is_left_out_of_chat_and_anthropic_instead_of_an_empty_message():
    items = [
        {"role": "user", "content": "q"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"role": "assistant", "content": [{"type": "output_text", "text": "a", "annotations": []}]},
    ]
    history = from_openai_responses(items, session_id="s")
    chat = to_openai_chat(history)
    assert [m["role"] for m in chat] == ["user", "assistant"]
    assert chat[1]["content"] == [{"type": "text", "text": "a"}] or chat[1]["content"] == "a"
    anthropic = to_anthropic_messages(history)["messages"]
    assert [m["role"] for m in anthropic] == ["user", "assistant"]
    assert all(m["content"] for m in anthropic)


def test_an_error_result_stays_an_error_for_formats_without_a_flag():
    payload = {
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "run", "input": {}}]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "boom", "is_error": True}
                ],
            },
        ]
    }
    history = from_anthropic_messages(payload, session_id="s")
    assert to_openai_chat(history)[2]["content"] == "Error: boom"
    assert to_openai_responses(history)[-1]["output"] == "Error: boom"
    assert to_anthropic_messages(history) == payload  # the flag itself where the format has one


@pytest.mark.parametrize(
    ("value", "convert"),
    [
        (lambda: chat_types.ChatCompletionMessage(role="assistant", content="hi"), from_openai_chat),
        (lambda: "not a list", from_openai_responses),
        (lambda: {"role": "user", "content": "one message, not a list"}, from_openai_chat),
    ],
    ids=["one SDK message", "a string", "one dict"],
)
def test_a_single_message_where_a_list_belongs_is_refused_with_a_hint(value, convert):
    with pytest.raises(InteropFormatError) as caught:
        convert(value(), session_id="s")
    assert caught.value.code == "interop-message-invalid"
    assert "expected a list of messages" in str(caught.value)


def test_an_sdk_object_whose_dump_fails_is_refused_with_a_code():
    class Broken:
        def model_dump(self, **_: object) -> dict[str, object]:
            raise RuntimeError("secret-bearing detail")

    with pytest.raises(InteropFormatError) as caught:
        from_openai_chat([Broken()], session_id="s")
    assert caught.value.code == "interop-message-invalid"
    assert "secret-bearing" not in str(caught.value)


def test_broken_argument_json_is_kept_verbatim_and_still_paired():
    messages = [
        {"role": "user", "content": "x"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": '}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
    ]
    history = from_openai_chat(messages, session_id="s")
    _assert_complete(history)
    assert to_openai_chat(history)[1]["tool_calls"][0]["function"]["arguments"] == '{"a": '
    assert json.loads(json.dumps(to_openai_chat(history))) == to_openai_chat(history)


def test_deeply_nested_input_is_refused_with_a_code_not_a_recursion_error():
    nested: object = "leaf"
    for _ in range(5_000):
        nested = [nested]
    with pytest.raises(InteropFormatError) as caught:
        from_openai_chat([{"role": "user", "content": "x", "extra": nested}], session_id="s")
    assert caught.value.code == "interop-nesting-too-deep"


def test_anthropic_signed_and_redacted_thinking_round_trip_byte_for_byte():
    blocks = [
        anthropic_types.ThinkingBlock(type="thinking", thinking="Check a.py first.", signature="sig-abc"),
        anthropic_types.RedactedThinkingBlock(type="redacted_thinking", data="opaque-data"),
        anthropic_types.TextBlock(type="text", text="Reading."),
        anthropic_types.ToolUseBlock(type="tool_use", id="toolu_1", name="read", input={"path": "a.py"}),
    ]
    payload = {
        "messages": [
            {"role": "user", "content": "Read a.py"},
            {"role": "assistant", "content": blocks},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "x"}]},
        ]
    }
    history = from_anthropic_messages(payload, session_id="s")
    _assert_complete(history)
    sent = to_anthropic_messages(history)
    expected = [block.model_dump(mode="json", exclude_none=True) for block in blocks]
    assert sent["messages"][1]["content"] == expected
    # Another format gets neither the signature nor the redacted data, and no empty message.
    chat = to_openai_chat(history)
    assert "sig-abc" not in str(chat)
    assert "opaque-data" not in str(chat)
    assert all(message.get("content") or message.get("tool_calls") for message in chat)
