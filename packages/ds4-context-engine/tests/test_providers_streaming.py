"""Streamed answers (SSE) from real servers on 127.0.0.1, in the three providers' event shapes.

Every event the servers send is first checked against the provider SDK's own event type, so the
fixtures are the shapes the providers document. The streams are cut into awkward pieces (inside a
line, between the CR and LF of a line end) to exercise the parser the way a network does.
"""

import json
import tracemalloc

import anthropic.types
import openai.types.chat
import openai.types.responses
import pydantic
import pytest
from _http_servers import Reply, ScriptedServer
from _provider_fixtures import assert_accepted_by, conversation, model, run_closing
from hypothesis import given
from hypothesis import strategies as st
from openai.types.chat import completion_create_params

from ds4_context_core.adapter import CompletionCompleted, CompletionFallback, CompletionRequest
from ds4_context_engine.providers import (
    PROVIDER_RESPONSE_MAX_BYTES,
    AnthropicMessagesTransport,
    OpenAIChatTransport,
    OpenAIResponsesTransport,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from ds4_context_engine.providers._sse import SseEvent, SseParser
from ds4_context_engine.runtime import ProviderRuntime

MIB = 1024 * 1024


def _sse(events, *, event_names=False, line_end="\n"):
    """The events as an SSE body; with ``event_names`` each carries ``event: <type>`` as Anthropic's do."""
    out = []
    for event in events:
        if event == "[DONE]":
            out.append(f"data: [DONE]{line_end}{line_end}")
            continue
        head = f"event: {event['type']}{line_end}" if event_names else ""
        out.append(f"{head}data: {json.dumps(event)}{line_end}{line_end}")
    return "".join(out).encode()


def _pieces(body: bytes, size: int = 7):
    return lambda: [body[i : i + size] for i in range(0, len(body), size)]


def _checked(adapter_type, events):
    adapter = pydantic.TypeAdapter(adapter_type)
    for event in events:
        if event != "[DONE]":
            adapter.validate_python(event)
    return events


CHAT_EVENTS = [
    {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4o-mini",
        "choices": [
            {"index": 0, "delta": {"role": "assistant", "content": "Reading "}, "finish_reason": None}
        ],
    },
    {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "delta": {"content": "the file."}, "finish_reason": None}],
    },
    {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "read", "arguments": '{"pa'},
                        }
                    ]
                },
                "finish_reason": None,
            }
        ],
    },
    {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "delta": {"tool_calls": [{"index": 0, "function": {"arguments": 'th": "README.md"}'}}]},
                "finish_reason": "tool_calls",
            }
        ],
    },
    {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4o-mini",
        "choices": [],
        "usage": {
            "prompt_tokens": 40,
            "completion_tokens": 9,
            "total_tokens": 49,
            "prompt_tokens_details": {"cached_tokens": 32},
        },
    },
    "[DONE]",
]

RESPONSES_FINAL = {
    "id": "resp_1",
    "object": "response",
    "created_at": 1,
    "status": "completed",
    "model": "gpt-4o-mini",
    "output": [
        {
            "type": "message",
            "id": "msg_1",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Reading the file.", "annotations": []}],
        },
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "read",
            "arguments": '{"path": "README.md"}',
            "status": "completed",
        },
    ],
    "parallel_tool_calls": True,
    "tool_choice": "auto",
    "tools": [],
    "usage": {
        "input_tokens": 40,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": 9,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 49,
    },
}

RESPONSES_EVENTS = [
    {
        "type": "response.output_text.delta",
        "item_id": "msg_1",
        "output_index": 0,
        "content_index": 0,
        "delta": "Reading ",
        "logprobs": [],
        "sequence_number": 1,
    },
    {
        "type": "response.output_text.delta",
        "item_id": "msg_1",
        "output_index": 0,
        "content_index": 0,
        "delta": "the file.",
        "logprobs": [],
        "sequence_number": 2,
    },
    {
        "type": "response.output_item.added",
        "output_index": 1,
        "item": {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "read",
            "arguments": "",
            "status": "in_progress",
        },
        "sequence_number": 3,
    },
    {
        "type": "response.function_call_arguments.delta",
        "item_id": "fc_1",
        "output_index": 1,
        "delta": '{"path": "README.md"}',
        "sequence_number": 4,
    },
    {"type": "response.completed", "response": RESPONSES_FINAL, "sequence_number": 5},
]

ANTHROPIC_EVENTS = [
    {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 12, "output_tokens": 1, "cache_read_input_tokens": 28},
        },
    },
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "ping"},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Reading "}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "the file."}},
    {"type": "content_block_stop", "index": 0},
    {
        "type": "content_block_start",
        "index": 1,
        "content_block": {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {}},
    },
    {
        "type": "content_block_delta",
        "index": 1,
        "delta": {"type": "input_json_delta", "partial_json": '{"pa'},
    },
    {
        "type": "content_block_delta",
        "index": 1,
        "delta": {"type": "input_json_delta", "partial_json": 'th": "README.md"}'},
    },
    {"type": "content_block_stop", "index": 1},
    {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use", "stop_sequence": None},
        "usage": {"output_tokens": 9},
    },
    {"type": "message_stop"},
]

_checked(openai.types.chat.ChatCompletionChunk, CHAT_EVENTS)
_checked(openai.types.responses.ResponseStreamEvent, RESPONSES_EVENTS)
_checked(anthropic.types.RawMessageStreamEvent, [e for e in ANTHROPIC_EVENTS if e["type"] != "ping"])

CASES = {
    "openai-chat": (
        lambda url: OpenAIChatTransport(base_url=url + "/v1", api_key="k", api_key_env=None),
        "/v1/chat/completions",
        _sse(CHAT_EVENTS),
        ("openai", "gpt-4o-mini"),
    ),
    "openai-responses": (
        lambda url: OpenAIResponsesTransport(base_url=url + "/v1", api_key="k", api_key_env=None),
        "/v1/responses",
        _sse(RESPONSES_EVENTS, event_names=True, line_end="\r\n"),
        ("openai", "gpt-4o-mini"),
    ),
    "anthropic": (
        lambda url: AnthropicMessagesTransport(base_url=url + "/v1", api_key="k", api_key_env=None),
        "/v1/messages",
        _sse(ANTHROPIC_EVENTS, event_names=True, line_end="\r"),
        ("anthropic", "claude-sonnet-4-5"),
    ),
}


def _stream(case, reply):
    make, path, _, (provider, model_id) = CASES[case]
    events = []
    with ScriptedServer() as server:
        server.on("POST", path, reply)
        transport = make(server.url)
        request = CompletionRequest.from_messages(conversation(), model=model(provider, model_id))
        result = run_closing(transport, transport.stream, request, events.append)
        sent = server.requests[0]
    return result, events, sent


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_streamed_answer_arrives_as_typed_deltas_and_ends_as_the_whole_result(case):
    body = CASES[case][2]
    result, events, sent = _stream(
        case, Reply(stream=_pieces(body), headers={"Content-Type": "text/event-stream"})
    )
    assert isinstance(result, CompletionCompleted), result
    assert result.output.text == "Reading the file."
    (call,) = result.output.tool_calls
    assert (call.name, call.arguments) == ("read", {"path": "README.md"})
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Reading the file."
    tool_deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert (tool_deltas[0].id, tool_deltas[0].name) == (call.id, "read")
    assert json.loads("".join(e.arguments for e in tool_deltas)) == {"path": "README.md"}
    assert isinstance(events[-1], UsageReport)  # usage comes once, at the end
    assert events[-1].usage == result.usage
    assert result.usage.input_tokens == 40
    assert sent.json()["stream"] is True
    assert sent.headers["accept"] == "text/event-stream"


def test_a_streamed_chat_request_asks_for_usage_and_is_accepted_by_the_sdk():
    _, _, sent = _stream("openai-chat", Reply(stream=_pieces(CASES["openai-chat"][2])))
    payload = sent.json()
    assert payload["stream_options"] == {"include_usage": True}
    assert_accepted_by(completion_create_params.CompletionCreateParamsStreaming, payload)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_stream_cut_in_the_middle_is_a_retryable_failure(case):
    body = CASES[case][2]
    result, events, _ = _stream(case, Reply(stream=_pieces(body[: len(body) * 2 // 3])))
    assert isinstance(result, CompletionFallback)
    assert (result.code, result.retryable) == ("transport-failed", True)
    assert result.failure.kind == "connection-error"
    assert events  # what arrived was shown; the turn is retried, not lost


def test_an_error_event_inside_an_anthropic_stream_is_a_transient_failure():
    events = [*ANTHROPIC_EVENTS[:4], {"type": "error", "error": {"type": "overloaded_error", "message": "x"}}]
    result, _, _ = _stream("anthropic", Reply(stream=_pieces(_sse(events, event_names=True))))
    assert isinstance(result, CompletionFallback)
    assert (result.failure.kind, result.retryable) == ("server-error", True)
    assert "overloaded_error" in result.failure.reason


def test_a_malformed_stream_event_is_an_invalid_response_not_an_exception():
    body = b'data: {"choices": [{"index": 0, "delta": {"content": 7}}]}\n\n'
    result, _, _ = _stream("openai-chat", Reply(stream=_pieces(body)))
    assert isinstance(result, CompletionFallback)
    assert (result.failure.kind, result.retryable) == ("invalid-response", False)


def test_a_raising_event_callback_ends_the_call_without_raising():
    def refuse(event):
        raise RuntimeError("the UI went away")

    with ScriptedServer() as server:
        server.on("POST", "/v1/chat/completions", Reply(stream=_pieces(CASES["openai-chat"][2])))
        transport = OpenAIChatTransport(base_url=server.url + "/v1", api_key="k", api_key_env=None)
        request = CompletionRequest.from_messages(conversation(), model=model())
        result = run_closing(transport, transport.stream, request, refuse)
    assert isinstance(result, CompletionFallback)
    assert (result.failure.kind, result.retryable) == ("client-error", False)


def test_an_endless_stream_is_cut_at_the_size_cap_while_reading():
    piece = b": keep-alive padding " + b"x" * (MIB - 23) + b"\n"
    with ScriptedServer() as server:
        server.on("POST", "/v1/chat/completions", Reply(stream=lambda: (piece for _ in range(96))))
        transport = OpenAIChatTransport(base_url=server.url + "/v1", api_key="k", api_key_env=None)
        request = CompletionRequest.from_messages(conversation(), model=model())
        tracemalloc.start()
        try:
            result = run_closing(transport, transport.stream, request, lambda event: None)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        sent = server.sent_bytes
    assert isinstance(result, CompletionFallback)
    assert "too large" in result.failure.reason
    assert sent < 96 * MIB
    assert peak < PROVIDER_RESPONSE_MAX_BYTES + 16 * MIB


def test_a_routed_stream_fails_over_after_a_cut_and_says_which_attempt_each_delta_is_from():
    body = CASES["openai-chat"][2]
    seen = []
    with ScriptedServer() as cloud, ScriptedServer() as backup:
        cloud.on("POST", "/v1/chat/completions", Reply(stream=_pieces(body[: len(body) // 2])))
        backup.on("POST", "/v1/chat/completions", Reply(stream=_pieces(body)))
        runtime = ProviderRuntime(
            {
                "openai": OpenAIChatTransport(base_url=cloud.url + "/v1", api_key="k", api_key_env=None),
                "backup": OpenAIChatTransport(
                    base_url=backup.url + "/v1", provider="backup", api_key="k", api_key_env=None
                ),
            },
            ["openai:gpt-4o-mini", "backup:gpt-4o-mini"],
        )
        request = CompletionRequest.from_messages(conversation(), model=model())
        routed = run_closing(
            runtime, runtime.stream, request, lambda context, event: seen.append((context.entry_index, event))
        )
    assert isinstance(routed.result, CompletionCompleted)
    assert routed.result.output.text == "Reading the file."
    assert [(f.model, f.kind) for f in routed.failovers] == [("openai:gpt-4o-mini", "connection-error")]
    first = [e for index, e in seen if index == 0]
    second = [e for index, e in seen if index == 1]
    assert first  # the cut attempt showed a part ...
    assert "".join(e.text for e in second if isinstance(e, TextDelta)) == "Reading the file."  # ... then all


# --- the SSE parser -------------------------------------------------------------------------------------


def test_the_sse_parser_follows_the_event_stream_rules():
    parser = SseParser()
    body = (
        "\ufeff: a comment\r\n"
        "event: first\r\n"
        "data: line one\r\n"
        "data:line two\r\n"
        "id: 7\r\n"
        "retry: 100\r\n"
        "\r\n"
        "data\n"
        "\n"
        "event: empty\n"
        "\n"
        "data: tail without a blank line"
    ).encode()
    events = parser.feed(body)
    assert events == [
        SseEvent(event="first", data="line one\nline two", id="7"),
        SseEvent(event="message", data="", id="7"),
    ]
    assert parser.pending  # the unfinished last event is not dispatched


@given(st.lists(st.integers(min_value=1, max_value=40), max_size=60))
def test_splitting_a_stream_anywhere_gives_the_same_events(sizes):
    body = _sse(ANTHROPIC_EVENTS, event_names=True, line_end="\r\n") + "data: ü€😀\r\n\r\n".encode()
    whole = SseParser().feed(body)
    parser, events, position = SseParser(), [], 0
    for size in sizes:
        events += parser.feed(body[position : position + size])
        position += size
    events += parser.feed(body[position:])
    assert events == whole
    assert whole[-1].data == "ü€😀"
    assert len(whole) == len(ANTHROPIC_EVENTS) + 1
