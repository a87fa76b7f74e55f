"""Messages flagged ``localOnly`` keep their content on this machine, whatever it says and in every format."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ds4_context_core as core
from ds4_context_core.adapter import CompletionRequest
from ds4_context_core.interop import (
    from_anthropic_messages,
    from_openai_chat,
    from_openai_responses,
    to_anthropic_messages,
    to_openai_chat,
    to_openai_responses,
)
from ds4_context_core.planner import plan_context
from ds4_context_core.privacy import enforce_payload_privacy, mark_local_only_messages

# "." cannot be part of a marker tag, so no tag the text holds can swallow the value itself.
PRIVATE = "Flat.7.Basement.Street"
MODEL = core.ModelDescriptor(provider="openai", id="gpt-4.1-mini", context_window=32_000, max_tokens=2_000)
FORMATS = {
    "canonical": lambda messages: {"messages": msgspec.to_builtins(messages)},
    "openai-chat": lambda messages: {"messages": to_openai_chat(messages)},
    "openai-responses": lambda messages: {"input": to_openai_responses(messages)},
    "anthropic": lambda messages: dict(to_anthropic_messages(messages)),
}


def _message(number, role, *blocks, local_only=None):
    return core.CanonicalMessage(
        id=f"s:{number}",
        source_entry_id=str(number),
        role=role,
        blocks=blocks,
        provenance=core.Provenance(source="runtime-session", session_id="s", entry_id=str(number)),
        flags=core.MessageFlags(local_only=local_only),
    )


def _history(text):
    """A user turn, a tool step and an answer, all flagged, each carrying ``text``; then a normal request."""
    call = core.ToolCallBlock(
        id="call-1", name="read", arguments={"path": text, "options": {"tags": [text, 3]}}
    )
    result = core.ToolResultBlock(tool_call_id="call-1", tool_name="read", content=text)
    return (
        _message(1, "user", core.TextBlock(text=text), local_only=True),
        _message(2, "assistant", core.ThinkingBlock(thinking=text), call, local_only=True),
        _message(3, "tool", result, local_only=True),
        _message(4, "assistant", core.TextBlock(text=f"noted: {text}"), local_only=True),
        _message(5, "user", core.TextBlock(text="what next?")),
    )


# Text built to break out of a wrapper: stray and matching tags of every level, escapes, backslashes
# before the end, quotes and JSON-looking pieces.
FRAGMENTS = st.sampled_from(
    [
        "plain ",
        "[ds4:local-only]",
        "[/ds4:local-only]",
        "[ds4:normal]",
        "[/ds4:normal]",
        "[DS4:INTERNAL]",
        "[/ds4:sensitive]",
        "\\[ds4:local-only]",
        "\\\\[/ds4:local-only]",
        "\\",
        '"',
        '\\"',
        "{",
        "}",
        "\n",
        "sk-" + "a" * 20,
    ]
)
TEXT = st.lists(FRAGMENTS, max_size=8).map(lambda parts: "".join([*parts, PRIVATE, *reversed(parts)]))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=TEXT, payload_format=st.sampled_from(sorted(FORMATS)))
def test_no_flagged_content_reaches_a_remote_provider(text, payload_format):
    payload = FORMATS[payload_format](mark_local_only_messages(_history(text)))
    sent = json.dumps(enforce_payload_privacy(payload, provider="openai").payload)
    assert PRIVATE not in sent
    assert "what next?" in sent


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=TEXT, payload_format=st.sampled_from(sorted(FORMATS)))
def test_a_local_provider_gets_the_flagged_content_without_markers(text, payload_format):
    payload = FORMATS[payload_format](mark_local_only_messages(_history(text)))
    sent = json.dumps(enforce_payload_privacy(payload, provider="ollama").payload)
    assert PRIVATE in sent
    assert "[ds4:local-only]" not in sent.lower()


def test_plain_text_reaches_a_local_provider_exactly_and_ids_still_pair():
    history = _history(PRIVATE)
    payload = {"messages": to_openai_chat(mark_local_only_messages(history))}
    local = enforce_payload_privacy(payload, provider="ollama").payload
    assert local == {"messages": to_openai_chat(history)}
    remote = enforce_payload_privacy(payload, provider="openai").payload["messages"]
    call = remote[1]["tool_calls"][0]
    assert (call["id"], remote[2]["tool_call_id"]) == ("call-1", "call-1")
    # Keys, numbers and the tool's name stay local too: the remote sees one placeholder and an identifier.
    assert json.loads(call["function"]["arguments"]) == {
        "__ds4_local_only": "[DS4 local-only content excluded by privacy policy]"
    }
    assert call["function"]["name"] == "ds4_excluded"


def test_unflagged_messages_come_back_as_the_same_objects():
    history = _history("x")
    marked = mark_local_only_messages(history)
    assert marked[4] is history[4]
    assert [m.id for m in marked] == [m.id for m in history]
    assert [m.flags for m in marked] == [m.flags for m in history]
    assert mark_local_only_messages([]) == ()


@pytest.mark.parametrize("payload_format", ["canonical", "openai-chat", "openai-responses", "anthropic"])
def test_completion_requests_built_from_a_plan_mark_flagged_messages(payload_format):
    plan = plan_context(_history(PRIVATE), model=MODEL)
    assert plan.ok
    request = CompletionRequest.from_plan(plan, model=MODEL, payload_format=payload_format)
    assert PRIVATE in json.dumps(request.payload)  # nothing is lost before privacy runs
    sent = json.dumps(enforce_payload_privacy(request.payload, provider="openai").payload)
    assert PRIVATE not in sent
    assert "what next?" in sent


def _structured_history():
    """A flagged tool step whose name, keys and numbers identify a person; then a normal request."""
    call = core.ToolCallBlock(
        id="call-7",
        name="lookup_patient_Jane_Doe",
        arguments={"Jane_Doe_record": 123456789, "flags": {"Jane_Doe_vip": True}, "ids": [987654321]},
    )
    result = core.ToolResultBlock(tool_call_id="call-7", tool_name="lookup_patient_Jane_Doe", content="ok")
    return (
        _message(1, "assistant", call, local_only=True),
        _message(2, "tool", result, local_only=True),
        _message(3, "user", core.TextBlock(text="what next?")),
    )


@pytest.mark.parametrize("payload_format", sorted(FORMATS))
def test_a_flagged_tool_step_keeps_names_keys_and_numbers_local(payload_format):
    history = _structured_history()
    payload = FORMATS[payload_format](mark_local_only_messages(history))
    sent = json.dumps(enforce_payload_privacy(payload, provider="openai").payload)
    for private in ("Jane_Doe", "123456789", "987654321", "lookup_patient"):
        assert private not in sent
    assert "what next?" in sent
    assert "call-7" in sent  # the call and its result still pair up


@pytest.mark.parametrize("payload_format", sorted(FORMATS))
def test_a_local_provider_gets_the_flagged_tool_step_exactly(payload_format):
    history = _structured_history()
    payload = FORMATS[payload_format](mark_local_only_messages(history))
    local = enforce_payload_privacy(payload, provider="ollama").payload
    # As JSON: the canonical format's unchanged parts are tuples in the input, lists in the copy.
    assert json.dumps(local) == json.dumps(FORMATS[payload_format](history))


# Provider histories whose unmodelled parts, message-level keys and per-call extra keys name a person and
# carry numbers: the interop keeps them as opaque blocks (and fields blocks) so nothing is lost.
_OPAQUE_SOURCES = {
    "openai-chat": lambda: from_openai_chat(
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "hi"},
                    {"type": "input_audio", "input_audio": {"Jane_Doe_ssn": 123456789, "format": "wav"}},
                ],
                "name": "Jane_Doe_user",
                "x_extra": {"Jane_Doe_key": 987654321},
            },
            {"role": "user", "content": "what next?"},
        ],
        session_id="s",
    ),
    "openai-responses": lambda: from_openai_responses(
        [
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "hi"},
                    {"type": "input_file", "file_id": "f1", "Jane_Doe_k": 123456789},
                ],
            },
            {"type": "web_search_call", "id": "ws_1", "Jane_Doe_q": {"n": 987654321}},
            {"type": "message", "role": "user", "content": "what next?"},
        ],
        session_id="s",
    ),
    "anthropic": lambda: from_anthropic_messages(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "hi"},
                        {"type": "document", "source": {"Jane_Doe_id": 123456789}},
                    ],
                    "x_extra": {"Jane_Doe_k": 987654321},
                },
                {"role": "user", "content": "what next?"},
            ]
        },
        session_id="s",
    ),
}
_WRITERS = {
    "openai-chat": lambda messages: {"messages": to_openai_chat(messages)},
    "openai-responses": lambda messages: {"input": to_openai_responses(messages)},
    "anthropic": lambda messages: dict(to_anthropic_messages(messages)),
}


def _all_but_last_flagged(messages):
    last = len(messages) - 1
    return tuple(
        msgspec.structs.replace(message, flags=msgspec.structs.replace(message.flags, local_only=True))
        if index < last
        else message
        for index, message in enumerate(messages)
    )


@pytest.mark.parametrize("canonical", [False, True], ids=["provider-format", "canonical"])
@pytest.mark.parametrize("source_format", sorted(_OPAQUE_SOURCES))
def test_opaque_parts_and_fields_of_a_flagged_message_keep_keys_and_numbers_local(source_format, canonical):
    history = _all_but_last_flagged(_OPAQUE_SOURCES[source_format]())

    def write(messages):
        if canonical:
            return {"messages": msgspec.to_builtins(messages)}
        return _WRITERS[source_format](messages)

    payload = write(mark_local_only_messages(history))
    sent = json.dumps(enforce_payload_privacy(payload, provider="openai").payload)
    for private in ("Jane_Doe", "123456789", "987654321"):
        assert private not in sent
    assert "what next?" in sent
    local = enforce_payload_privacy(payload, provider="ollama").payload
    assert json.dumps(local) == json.dumps(write(history))


def test_a_flagged_responses_call_keeps_its_extra_keys_local():
    history = from_openai_responses(
        [
            {
                "type": "function_call",
                "call_id": "c1",
                "name": "lookup",
                "arguments": '{"q":1}',
                "status": "completed",
                "Jane_Doe_extra": 123456789,
            },
            {"type": "function_call_output", "call_id": "c1", "output": "ok", "Jane_Doe_out": 987654321},
            {"type": "message", "role": "user", "content": "what next?"},
        ],
        session_id="s",
    )
    history = _all_but_last_flagged(history)
    payload = {"input": to_openai_responses(mark_local_only_messages(history))}
    sent = json.dumps(enforce_payload_privacy(payload, provider="openai").payload)
    for private in ("Jane_Doe", "123456789", "987654321"):
        assert private not in sent
    assert '"c1"' in sent  # the call and its output still pair up
    local = enforce_payload_privacy(payload, provider="ollama").payload
    assert json.dumps(local) == json.dumps({"input": to_openai_responses(history)})
