import json
import socket
import threading

import anthropic.types
import anyio
import msgspec
import openai.types.chat
import openai.types.responses
import pytest
from _http_servers import Reply, ScriptedServer, closed_port_url
from _provider_fixtures import (
    ANTHROPIC_ANSWER,
    ANTHROPIC_OVERLOADED_BODY,
    OPENAI_CHAT_ANSWER,
    OPENAI_CHAT_TOOL_ANSWER,
    OPENAI_RATE_LIMIT_BODY,
    assert_accepted_by,
    conversation,
    message,
    model,
    responses_answer,
    run_closing,
)
from anthropic.types import message_create_params
from openai.types.chat import completion_create_params
from openai.types.responses import response_create_params

from ds4_context_core import MessageFlags, TextBlock, ToolCallBlock, ToolResultBlock
from ds4_context_core.adapter import (
    CompletionCompleted,
    CompletionFallback,
    CompletionRequest,
    DiagnosticsBuffer,
    complete_with_guards,
)
from ds4_context_core.interop import to_openai_chat, to_openai_responses
from ds4_context_core.planner import plan_context
from ds4_context_core.privacy import enforce_payload_privacy
from ds4_context_engine.providers import (
    AnthropicMessagesTransport,
    OpenAIChatTransport,
    OpenAIResponsesTransport,
    ProviderTransportError,
    ToolDefinition,
    local_provider_transport,
    parse_local_provider,
    parse_retry_after_ms,
)
from ds4_context_engine.runtime import FallbackRouter, RetryPolicy

READ_TOOL = ToolDefinition(
    name="read",
    description="Read a file from the workspace.",
    parameters={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)
SECRET = "sk-proj-" + "Zq7mW2xLp9Zr4Kd8Nc3vT1Bb5Hy6Jt0Fs8Qe3Ug7V"


def _chat(server, **kwargs):
    kwargs.setdefault("api_key", "test-key")
    kwargs.setdefault("api_key_env", None)
    return OpenAIChatTransport(base_url=server.url + "/v1", **kwargs)


def _request(**kwargs):
    messages = kwargs.pop("messages", conversation())
    return CompletionRequest.from_messages(messages, model=kwargs.pop("model", model()), **kwargs)


def _complete(transport, request):
    return run_closing(transport, transport.complete, request)


# --- OpenAI Chat Completions ---------------------------------------------------------------------------


def test_chat_payload_is_accepted_by_the_openai_sdk_types_and_the_answer_parses():
    observations = []
    with ScriptedServer() as server:
        server.on("POST", "/v1/chat/completions", Reply(body=OPENAI_CHAT_ANSWER))
        transport = _chat(server, on_usage=observations.append)
        result = _complete(transport, _request(system="Be brief.", tools=(READ_TOOL,), max_output_tokens=256))
        sent = server.requests[0]
    payload = sent.json()
    assert sent.headers["authorization"] == "Bearer test-key"
    assert_accepted_by(completion_create_params.CompletionCreateParamsNonStreaming, payload)
    assert payload["messages"][0] == {"role": "system", "content": "Be brief."}
    assert payload["max_completion_tokens"] == 256
    assert payload["tools"][0]["function"]["name"] == "read"
    assert result.status == "completed"
    assert result.output.text == "The commands are demo, plan and status."
    assert result.output.stop_reason == "stop"
    assert result.usage.input_tokens == 96
    assert result.usage.cache_read_input_tokens == 64
    assert observations[0].usage == result.usage
    assert observations[0].estimated_input_tokens > 0
    assert observations[0].model == "gpt-4o-mini"


def test_chat_tool_calls_are_parsed_with_decoded_arguments():
    with ScriptedServer() as server:
        server.on("POST", "/v1/chat/completions", Reply(body=OPENAI_CHAT_TOOL_ANSWER))
        result = _complete(_chat(server), _request())
    assert result.output.text == ""
    call = result.output.tool_calls[0]
    assert (call.id, call.name, call.arguments) == ("call_9ZtbtxK6Qy", "read", {"path": "docs/cli.md"})


def test_rate_limit_honours_retry_after_and_never_echoes_the_body():
    with ScriptedServer() as server:
        server.on(
            "POST",
            "/v1/chat/completions",
            Reply(status=429, body=OPENAI_RATE_LIMIT_BODY, headers={"Retry-After": "3"}),
        )
        result = _complete(_chat(server), _request())
    assert result.status == "fallback"
    assert result.code == "transport-failed"
    assert result.retryable is True
    assert result.failure.kind == "rate-limited"
    assert result.failure.retry_after_ms == 3000
    assert result.failure.http_status == 429
    assert "rate_limit_exceeded" in result.failure.reason
    assert "org-x" not in msgspec.json.encode(result).decode()


@pytest.mark.parametrize(
    "code", ["sk-proj-Zq81mWx0aLp2Kd7Tr4Nv9Bc6", "AKIAZQ81MWX0ALP2KD7T", "bad key hunter2"]
)
def test_an_error_code_that_is_not_a_code_is_never_passed_on(code: str) -> None:
    # A server that echoes the key it was sent in its error code must not put it in the result.
    body = msgspec.json.encode({"error": {"code": code, "type": code, "message": code}})
    with ScriptedServer() as server:
        server.on("POST", "/v1/chat/completions", Reply(status=401, body=body))
        result = _complete(_chat(server), _request())
    assert result.status == "fallback"
    assert code not in msgspec.json.encode(result).decode()
    assert code[:12] not in msgspec.json.encode(result).decode()


@pytest.mark.parametrize(
    ("status", "kind", "retryable"),
    [
        (500, "server-error", True),
        (503, "server-error", True),
        (400, "client-error", False),
        (401, "authentication", False),
        (403, "authentication", False),
        (404, "client-error", False),
        (408, "timeout", True),
    ],
)
def test_http_errors_are_classified(status, kind, retryable):
    with ScriptedServer() as server:
        server.on(
            "POST",
            "/v1/chat/completions",
            Reply(status=status, body={"error": {"message": "x", "type": "server_error"}}),
        )
        result = _complete(_chat(server), _request())
    assert (result.status, result.failure.kind, result.retryable) == ("fallback", kind, retryable)


def test_slow_provider_times_out_as_a_retryable_fallback():
    with ScriptedServer() as server:
        server.on("POST", "/v1/chat/completions", Reply(body=OPENAI_CHAT_ANSWER, delay_s=0.5))
        result = _complete(_chat(server, timeout_s=0.05), _request())
    assert result.failure.kind == "timeout"
    assert result.retryable is True


@pytest.mark.parametrize(
    "reply",
    [
        Reply(raw=b'{"id": "chatcmpl-1", "choices": [{"message": '),
        Reply(raw=b"<html>502 Bad Gateway</html>", headers={"Content-Type": "text/html"}),
        Reply(body={"id": "chatcmpl-1", "choices": []}),
        Reply(body={"id": "chatcmpl-1", "choices": [{"message": {"content": 7}}]}),
    ],
)
def test_malformed_answers_become_invalid_response_fallbacks(reply):
    with ScriptedServer() as server:
        server.on("POST", "/v1/chat/completions", reply)
        result = _complete(_chat(server), _request())
    assert result.status == "fallback"
    assert result.failure.kind == "invalid-response"
    assert result.retryable is False


@pytest.mark.parametrize(
    ("arguments", "code"),
    [("{oops", "tool-arguments-invalid-json"), ("[1, 2]", "tool-arguments-not-object")],
)
def test_broken_tool_call_arguments_keep_the_answer_and_mark_the_call(arguments, code):
    # the model's own mistake: the run loop answers that call with an error, the rest of the answer stands
    calls = [
        {"id": "c1", "function": {"name": "r", "arguments": arguments}},
        {"id": "c2", "function": {"name": "r", "arguments": '{"path": "a.txt"}'}},
    ]
    body = {"choices": [{"message": {"content": "reading", "tool_calls": calls}}]}
    with ScriptedServer() as server:
        server.on("POST", "/v1/chat/completions", Reply(body=body))
        result = _complete(_chat(server), _request())
    assert result.status == "completed"
    broken, fine = result.output.tool_calls
    assert (broken.arguments, broken.arguments_error) == ({}, code)
    assert (fine.arguments, fine.arguments_error) == ({"path": "a.txt"}, None)


def test_connection_refused_is_a_retryable_connection_error():
    transport = OpenAIChatTransport(base_url=closed_port_url() + "/v1", api_key_env=None)
    result = _complete(transport, _request())
    assert result.failure.kind == "connection-error"
    assert result.retryable is True


def test_secrets_are_redacted_and_local_only_content_withheld_before_sending():
    messages = (
        message(1, "user", TextBlock(text=f"deploy with {SECRET} please")),
        message(2, "user", TextBlock(text="[ds4:local-only]my home address[/ds4:local-only] and the plan")),
    )
    with ScriptedServer() as server:
        server.on("POST", "/v1/chat/completions", Reply(body=OPENAI_CHAT_ANSWER))
        result = _complete(_chat(server), _request(messages=messages))
        body = server.requests[0].body.decode()
    assert result.status == "completed"
    assert SECRET not in body
    assert "my home address" not in body
    assert "and the plan" in body


def test_local_provider_receives_local_only_content_when_policy_says_it_is_local():
    messages = (message(1, "user", TextBlock(text="[ds4:local-only]my home address[/ds4:local-only]")),)
    with ScriptedServer() as server:
        server.on("POST", "/v1/chat/completions", Reply(body=OPENAI_CHAT_ANSWER))
        definition = parse_local_provider({"id": "ollama", "type": "ollama", "baseUrl": server.url})
        transport = local_provider_transport(definition)
        result = _complete(
            transport,
            _request(messages=messages, model=model("ollama", "llama3.2:latest"), max_output_tokens=64),
        )
        sent = server.requests[0]
    assert result.status == "completed"
    assert sent.path == "/v1/chat/completions"
    assert "my home address" in sent.body.decode()
    assert sent.json()["max_tokens"] == 64
    assert "authorization" not in sent.headers


PRIVATE = "Flat.7.Basement.Street"  # "." cannot be part of a marker tag


def _flagged_conversation():
    """A tool step whose messages are flagged localOnly (no marker anywhere), then a normal request."""
    flags = MessageFlags(local_only=True)
    call = ToolCallBlock(id="call_9", name="read", arguments={"path": f"notes/{PRIVATE}.txt", "n": 2})
    result = ToolResultBlock(tool_call_id="call_9", tool_name="read", content=f"lives at {PRIVATE}")
    return (
        msgspec.structs.replace(message(1, "assistant", call), flags=flags),
        msgspec.structs.replace(message(2, "tool", result), flags=flags),
        message(3, "user", TextBlock(text="Now plan the move, without the address.")),
    )


@pytest.mark.parametrize("make", ["chat", "responses", "anthropic"])
def test_messages_flagged_local_only_never_reach_a_remote_provider(make):
    answers = {
        "chat": ("/v1/chat/completions", OPENAI_CHAT_ANSWER),
        "responses": ("/v1/responses", responses_answer("resp_1", "Planned.")),
        "anthropic": ("/v1/messages", ANTHROPIC_ANSWER),
    }
    path, answer = answers[make]
    with ScriptedServer() as server:
        server.on("POST", path, Reply(body=answer))
        transport = {
            "chat": lambda: _chat(server),
            "responses": lambda: OpenAIResponsesTransport(
                base_url=server.url + "/v1", api_key="k", api_key_env=None
            ),
            "anthropic": lambda: _anthropic(server),
        }[make]()
        provider = "anthropic" if make == "anthropic" else "openai"
        result = _complete(transport, _request(messages=_flagged_conversation(), model=model(provider)))
        body = server.requests[0].body.decode()
    assert result.status == "completed", result.failure
    assert PRIVATE not in body
    assert "local-only content excluded by privacy policy" in body
    assert "call_9" in body  # the tool step still pairs up
    assert "without the address" in body


def test_a_local_provider_receives_flagged_content_without_markers():
    with ScriptedServer() as server:
        server.on("POST", "/v1/chat/completions", Reply(body=OPENAI_CHAT_ANSWER))
        definition = parse_local_provider({"id": "ollama", "type": "ollama", "baseUrl": server.url})
        request = _request(messages=_flagged_conversation(), model=model("ollama", "llama3.2:latest"))
        result = _complete(local_provider_transport(definition), request)
        sent = server.requests[0].json()
    assert result.status == "completed"
    call = sent["messages"][0]["tool_calls"][0]["function"]
    assert json.loads(call["arguments"]) == {"path": f"notes/{PRIVATE}.txt", "n": 2}
    assert sent["messages"][1]["content"] == f"lives at {PRIVATE}"
    assert "ds4:" not in json.dumps(sent)


def test_privacy_failure_fails_closed_without_any_request():
    def unserializable(messages):
        return [{"role": "user", "content": object()}]

    with ScriptedServer() as server:
        server.on("POST", "/v1/chat/completions", Reply(body=OPENAI_CHAT_ANSWER))
        transport = OpenAIChatTransport(
            base_url=server.url + "/v1", converter=unserializable, api_key_env=None
        )
        result = _complete(transport, _request())
        assert server.requests == []
    assert result.status == "fallback"
    assert result.code == "privacy-enforcement-failed"
    assert result.retryable is False


@pytest.mark.parametrize("error", [ValueError("cannot convert"), AttributeError("bug"), RecursionError()])
def test_unconvertible_request_is_an_invalid_request_fallback_without_any_request(error):
    def refuse(messages):
        raise error

    with ScriptedServer() as server:
        transport = OpenAIChatTransport(base_url=server.url + "/v1", converter=refuse, api_key_env=None)
        result = _complete(transport, _request())
        assert server.requests == []
    assert result.code == "invalid-request"
    assert result.retryable is False


def test_a_raising_usage_hook_does_not_lose_the_answer():
    def broken(observation):
        raise RuntimeError("calibration store down")

    with ScriptedServer() as server:
        server.on("POST", "/v1/chat/completions", Reply(body=OPENAI_CHAT_ANSWER))
        result = _complete(_chat(server, on_usage=broken), _request())
    assert result.status == "completed"


def test_api_key_from_environment_and_never_in_results(monkeypatch):
    monkeypatch.setenv("DS4_TEST_KEY", "env-secret-key")
    with ScriptedServer() as server:
        server.on(
            "POST", "/v1/chat/completions", Reply(status=401, body={"error": {"type": "invalid_api_key"}})
        )
        transport = OpenAIChatTransport(
            base_url=server.url + "/v1",
            api_key="inline",
            api_key_env="DS4_TEST_KEY",
        )
        result = _complete(transport, _request())
        assert server.requests[0].headers["authorization"] == "Bearer env-secret-key"
    assert "env-secret-key" not in msgspec.json.encode(result).decode()
    assert "env-secret-key" not in repr(transport)


def test_transport_runs_under_trio():
    with ScriptedServer() as server:
        server.on("POST", "/v1/chat/completions", Reply(body=OPENAI_CHAT_ANSWER))
        transport = _chat(server)
        result = run_closing(transport, transport.complete, _request(), backend="trio")
    assert result.status == "completed"


# --- Anthropic Messages --------------------------------------------------------------------------------


def _anthropic(server, **kwargs):
    return AnthropicMessagesTransport(
        base_url=server.url + "/v1",
        api_key="ant-test",
        api_key_env=None,
        **kwargs,
    )


def test_anthropic_payload_headers_and_cache_breakpoints():
    messages = (message(0, "system", TextBlock(text="Project rules.")), *conversation())
    with ScriptedServer() as server:
        server.on("POST", "/v1/messages", Reply(body=ANTHROPIC_ANSWER))
        result = _complete(
            _anthropic(server),
            _request(
                messages=messages,
                model=model("anthropic", "claude-sonnet-4-5"),
                system="Be brief.",
                tools=(READ_TOOL,),
                stable_prefix_count=4,
            ),
        )
        sent = server.requests[0]
    payload = sent.json()
    assert sent.headers["x-api-key"] == "ant-test"
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert_accepted_by(message_create_params.MessageCreateParamsNonStreaming, payload)
    assert payload["max_tokens"] == 1024
    assert [block["text"] for block in payload["system"]] == ["Be brief.", "Project rules."]
    assert payload["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in payload["system"][0]
    assert payload["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    # Stable prefix: the system message plus user, tool call and tool result. The tool result is the
    # last block of the prefix; the assistant text after it is not.
    marked = [
        (index, block["type"])
        for index, msg in enumerate(payload["messages"])
        for block in msg["content"]
        if "cache_control" in block
    ]
    assert marked == [(2, "tool_result")]
    assert sum(1 for _ in marked) + 2 <= 4
    assert result.output.text == "I'll read the docs."
    assert result.output.tool_calls[0].arguments == {"path": "docs/cli.md"}
    assert result.usage.input_tokens == 12 + 2048
    assert result.usage.cache_read_input_tokens == 2048


def test_anthropic_breakpoint_lands_inside_a_merged_message():
    messages = (*conversation()[:3], message(9, "user", TextBlock(text="and the tests?")))
    with ScriptedServer() as server:
        server.on("POST", "/v1/messages", Reply(body=ANTHROPIC_ANSWER))
        _complete(
            _anthropic(server),
            _request(messages=messages, model=model("anthropic", "claude-sonnet-4-5"), stable_prefix_count=3),
        )
        payload = server.requests[0].json()
    last = payload["messages"][-1]
    assert [block["type"] for block in last["content"]] == ["tool_result", "text"]
    assert last["content"][0]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in last["content"][1]


def test_anthropic_without_stable_prefix_marks_no_message():
    with ScriptedServer() as server:
        server.on("POST", "/v1/messages", Reply(body=ANTHROPIC_ANSWER))
        _complete(_anthropic(server), _request(model=model("anthropic", "claude-sonnet-4-5")))
        payload = server.requests[0].json()
    assert "cache_control" not in json.dumps(payload["messages"])


def test_anthropic_overloaded_is_retryable():
    with ScriptedServer() as server:
        server.on("POST", "/v1/messages", Reply(status=529, body=ANTHROPIC_OVERLOADED_BODY))
        result = _complete(_anthropic(server), _request(model=model("anthropic", "claude-sonnet-4-5")))
    assert result.failure.kind == "server-error"
    assert "overloaded_error" in result.failure.reason
    assert result.retryable is True


# --- OpenAI Responses with continuation ----------------------------------------------------------------


def _responses(server):
    return OpenAIResponsesTransport(base_url=server.url + "/v1", api_key="k", api_key_env=None)


def _assistant_reply(index, text):
    return message(index, "assistant", TextBlock(text=text))


def test_responses_continue_only_when_the_stored_state_matches():
    with ScriptedServer() as server:
        server.on(
            "POST",
            "/v1/responses",
            Reply(body=responses_answer("resp_1", "First answer.")),
            Reply(body=responses_answer("resp_2", "Second answer.")),
        )
        transport = _responses(server)
        first = _complete(transport, _request(system="Be brief."))
        history = (
            *conversation(),
            _assistant_reply(6, "First answer."),
            message(7, "user", TextBlock(text="More?")),
        )
        second = _complete(
            transport, _request(messages=history, system="Be brief.", continuation=first.continuation)
        )
        full, short = server.requests[0].json(), server.requests[1].json()
    assert_accepted_by(response_create_params.ResponseCreateParamsNonStreaming, full)
    assert_accepted_by(response_create_params.ResponseCreateParamsNonStreaming, short)
    assert "previous_response_id" not in full
    assert first.continued_from is None
    assert first.continuation.response_id == "resp_1"
    assert short["previous_response_id"] == "resp_1"
    assert short["input"] == [{"role": "user", "content": "More?"}]
    assert short["instructions"] == "Be brief."
    assert second.continued_from == "resp_1"
    assert second.continuation.response_id == "resp_2"
    assert second.continuation.prefix_count == len(history)


@pytest.mark.parametrize(
    "change",
    [
        "edited-prefix",
        "trimmed-prefix",
        "different-reply",
        "different-system",
        "different-model",
        "no-new-message",
    ],
)
def test_responses_replay_in_full_when_anything_differs(change):
    with ScriptedServer() as server:
        server.on("POST", "/v1/responses", Reply(body=responses_answer("resp_1", "First answer.")))
        transport = _responses(server)
        first = _complete(transport, _request(system="Be brief."))
        base = conversation()
        reply = _assistant_reply(6, "First answer.")
        follow = message(7, "user", TextBlock(text="More?"))
        system, descriptor = "Be brief.", model()
        if change == "edited-prefix":
            history = (message(1, "user", TextBlock(text="Summarize CHANGELOG.md")), *base[1:], reply, follow)
        elif change == "trimmed-prefix":
            history = (*base[2:], reply, follow)
        elif change == "different-reply":
            history = (*base, _assistant_reply(6, "Another answer."), follow)
        elif change == "different-system":
            history, system = (*base, reply, follow), "Be verbose."
        elif change == "different-model":
            history, descriptor = (*base, reply, follow), model(model_id="gpt-4.1")
        else:
            history = (*base, reply)
        _complete(
            transport,
            _request(messages=history, system=system, model=descriptor, continuation=first.continuation),
        )
        second = server.requests[1].json()
    assert "previous_response_id" not in second
    assert second["input"] == to_openai_responses(history)


def test_responses_without_storage_never_continue():
    with ScriptedServer() as server:
        server.on("POST", "/v1/responses", Reply(body=responses_answer("resp_1", "First answer.")))
        transport = OpenAIResponsesTransport(
            base_url=server.url + "/v1", api_key="k", api_key_env=None, store=False
        )
        first = _complete(transport, _request())
        assert first.continuation is None
        assert server.requests[0].json()["store"] is False


def test_responses_replay_in_full_when_the_stored_response_is_gone():
    with ScriptedServer() as server:
        server.on(
            "POST",
            "/v1/responses",
            Reply(body=responses_answer("resp_1", "First answer.")),
            Reply(
                status=400,
                body={"error": {"type": "invalid_request_error", "code": "previous_response_not_found"}},
            ),
            Reply(body=responses_answer("resp_3", "Replayed.")),
        )
        transport = _responses(server)
        first = _complete(transport, _request())
        history = (
            *conversation(),
            _assistant_reply(6, "First answer."),
            message(7, "user", TextBlock(text="More?")),
        )
        second = _complete(transport, _request(messages=history, continuation=first.continuation))
        bodies = [r.json() for r in server.requests]
    assert bodies[1]["previous_response_id"] == "resp_1"
    assert "previous_response_id" not in bodies[2]
    assert second.status == "completed"
    assert second.continued_from is None
    assert second.continuation.response_id == "resp_3"


# --- Official SDK response models through our parsers --------------------------------------------------


def test_our_parsers_accept_the_sdk_response_models():
    chat = openai.types.chat.ChatCompletion.model_validate(OPENAI_CHAT_TOOL_ANSWER)
    output, usage = OpenAIChatTransport().parse_response(chat.model_dump(mode="json"))
    assert output.tool_calls[0].arguments == {"path": "docs/cli.md"}
    assert usage.output_tokens == 18

    message_model = anthropic.types.Message.model_validate(ANTHROPIC_ANSWER)
    output, usage = AnthropicMessagesTransport().parse_response(message_model.model_dump(mode="json"))
    assert output.tool_calls[0].id == "toolu_01A09q90qw90lq917835lq9"
    assert usage.cache_read_input_tokens == 2048

    response = openai.types.responses.Response.model_validate(responses_answer("resp_9", "Hello."))
    output, usage = OpenAIResponsesTransport().parse_response(response.model_dump(mode="json"))
    assert (output.text, output.response_id, usage.input_tokens) == ("Hello.", "resp_9", 36)


def test_the_openai_client_reads_what_our_test_server_serves():
    # The peer client against the same fixtures keeps the fixtures honest.
    with ScriptedServer() as server:
        server.on("POST", "/v1/chat/completions", Reply(body=OPENAI_CHAT_ANSWER))
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0)
        completion = client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]
        )
        client.close()
    assert completion.choices[0].message.content == "The commands are demo, plan and status."


# --- Retry-After parsing and the router over real transports -------------------------------------------


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "7"}, 7000),
        ({"retry-after-ms": "250"}, 250),
        ({"retry-after-ms": "junk", "retry-after": "2"}, 2000),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:10 GMT"}, 10_000),
        ({"retry-after": "Wed, 21 Oct 2015 07:27:00 GMT"}, 0),
        ({"retry-after": "soon"}, None),
        ({}, None),
    ],
)
def test_retry_after_parsing(headers, expected):
    now = 1445412480.0  # Wed, 21 Oct 2015 07:28:00 GMT
    assert parse_retry_after_ms(headers, now=now) == expected


def test_router_fails_over_from_a_rate_limited_cloud_model_to_a_local_one():
    slept = []

    async def sleep(seconds):
        slept.append(seconds)

    with ScriptedServer() as cloud, ScriptedServer() as local:
        cloud.on(
            "POST",
            "/v1/chat/completions",
            Reply(status=429, body=OPENAI_RATE_LIMIT_BODY, headers={"Retry-After": "1"}),
            Reply(status=502, raw=b"<html>bad gateway</html>"),
        )
        local.on("POST", "/v1/chat/completions", Reply(body=OPENAI_CHAT_ANSWER))
        transports = {
            "openai": _chat(cloud),
            "ollama": local_provider_transport(
                parse_local_provider({"id": "ollama", "type": "ollama", "baseUrl": local.url}),
            ),
        }
        router = FallbackRouter(
            [{"model": "openai:gpt-4o-mini", "attempts": 2}, "ollama:llama3.2"],
            retry_policy=RetryPolicy(initial_backoff_ms=10),
            sleep=sleep,
        )

        async def send(context):
            reference = context.entry.model
            return await transports[reference.provider].complete(
                _request(model=model(reference.provider, reference.model))
            )

        async def main():
            async with transports["openai"], transports["ollama"]:
                return await router.run(send)

        routed = anyio.run(main)
    assert routed.result.status == "completed"
    assert routed.model.reference == "ollama:llama3.2"
    assert [(f.kind, f.http_status) for f in routed.failovers] == [
        ("rate-limited", 429),
        ("server-error", 502),
    ]
    assert slept == [1.0]


def test_request_from_a_plan_uses_its_messages_and_shared_prefix():
    first = plan_context(conversation()[:3], model=model())
    second = plan_context(conversation(), model=model(), state=first.state)
    request = CompletionRequest.from_messages(
        second.messages,
        model=model(),
        system="Be brief.",
        stable_prefix_count=second.manifest.shared_prefix_messages,
    )
    assert request.messages == second.messages
    assert request.stable_prefix_count == second.manifest.shared_prefix_messages == 3
    assert request.system == "Be brief."


def test_usage_observation_gives_a_calibration_ratio():
    observations = []
    with ScriptedServer() as server:
        server.on("POST", "/v1/chat/completions", Reply(body=OPENAI_CHAT_ANSWER))
        _complete(_chat(server, on_usage=observations.append), _request(estimated_input_tokens=80))
    assert observations[0].calibration_ratio == 96 / 80


def test_a_connection_dropped_mid_answer_is_a_retryable_connection_error():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def serve_once():
        connection, _ = listener.accept()
        connection.recv(65536)
        connection.sendall(
            b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{"id":'
        )
        connection.close()

    thread = threading.Thread(target=serve_once, daemon=True)
    thread.start()
    port = listener.getsockname()[1]
    transport = OpenAIChatTransport(base_url=f"http://127.0.0.1:{port}/v1", api_key_env=None)
    result = _complete(transport, _request())
    thread.join(timeout=5)
    listener.close()
    assert result.status == "fallback"
    assert result.failure.kind == "connection-error"
    assert result.retryable is True


# --- The core adapter boundary -------------------------------------------------------------------------


def test_payload_transport_plugs_into_the_core_adapter_flow():
    diagnostics = DiagnosticsBuffer()

    def enforce(request):
        return enforce_payload_privacy(dict(request.payload), provider=request.provider)

    with ScriptedServer() as server:
        server.on(
            "POST",
            "/v1/chat/completions",
            Reply(body=OPENAI_CHAT_ANSWER),
            Reply(status=503, body={"error": {"type": "server_error"}}, headers={"Retry-After": "1"}),
        )
        transport = _chat(server)
        send = transport.payload_transport()
        request = CompletionRequest(
            provider="openai", model="gpt-4o-mini", payload={"messages": to_openai_chat(conversation())}
        )

        async def main():
            async with transport:
                return await both()

        async def both():
            ok = await complete_with_guards(
                request, closed=False, enforce_privacy=enforce, transport=send, diagnostics=diagnostics
            )
            failed = await complete_with_guards(
                request, closed=False, enforce_privacy=enforce, transport=send, diagnostics=diagnostics
            )
            return ok, failed

        ok, failed = anyio.run(main)
        sent = server.requests[0].json()
    assert sent["model"] == "gpt-4o-mini"
    assert_accepted_by(completion_create_params.CompletionCreateParamsNonStreaming, sent)
    assert isinstance(ok, CompletionCompleted)
    assert ok.output.text == "The commands are demo, plan and status."
    assert isinstance(failed, CompletionFallback)
    assert failed.code == "transport-failed"
    assert failed.retryable is True


def test_payload_transport_raises_a_coded_error_with_the_failure():
    with ScriptedServer() as server:
        server.on(
            "POST",
            "/v1/chat/completions",
            Reply(status=429, body=OPENAI_RATE_LIMIT_BODY, headers={"Retry-After": "2"}),
        )
        transport = _chat(server)
        request = CompletionRequest(provider="openai", model="gpt-4o-mini", payload={"messages": []})
        with pytest.raises(ProviderTransportError) as caught:
            run_closing(transport, transport.payload_transport(), request)
    assert caught.value.code == "provider-transport-failed"
    assert caught.value.failure.kind == "rate-limited"
    assert caught.value.failure.retry_after_ms == 2000


def test_anthropic_breakpoints_never_mutate_what_the_converter_returned():
    shared_blocks = [{"type": "text", "text": "pinned rules"}]
    shared = {
        "system": [{"type": "text", "text": "sys"}],
        "messages": [{"role": "user", "content": shared_blocks}],
    }

    def converter(messages):
        return shared

    transport = AnthropicMessagesTransport(api_key_env=None, converter=converter)
    request = _request(
        model=model("anthropic", "claude-sonnet-4-5"), stable_prefix_count=1, tools=(READ_TOOL,)
    )
    first = transport.build_payload(request)
    second = transport.build_payload(request)
    assert first == second
    assert first["messages"][0]["content"][0]["cache_control"] == {"type": "ephemeral"}
    assert shared == {
        "system": [{"type": "text", "text": "sys"}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "pinned rules"}]}],
    }
    assert READ_TOOL.parameters == {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
    }


# --- One completion path: privacy runs exactly once per send --------------------------------------------


def _counting_privacy(monkeypatch, *module_names):
    """Replace ``enforce_payload_privacy`` where the given modules call it; return the call log."""
    calls = []

    def counted(payload, **kwargs):
        calls.append(kwargs["provider"])
        return enforce_payload_privacy(payload, **kwargs)

    for name in ("ds4_context_engine.providers._transport", *module_names):
        monkeypatch.setattr(f"{name}.enforce_payload_privacy", counted)
    return calls


def _secret_conversation():
    return (message(1, "user", TextBlock(text=f"deploy with {SECRET} please")),)


def test_a_transport_send_enforces_privacy_exactly_once(monkeypatch):
    calls = _counting_privacy(monkeypatch)
    with ScriptedServer() as server:
        server.on("POST", "/v1/chat/completions", Reply(body=OPENAI_CHAT_ANSWER))
        result = _complete(_chat(server), _request(messages=_secret_conversation()))
        body = server.requests[0].body.decode()
    assert isinstance(result, CompletionCompleted)
    assert calls == ["openai"]
    assert result.privacy.secret_redactions == 1
    assert SECRET not in body


def test_a_transport_screens_only_new_messages_and_sends_what_a_fresh_one_would(monkeypatch):
    history = (
        *_secret_conversation(),
        message(2, "assistant", TextBlock(text="done [ds4:sensitive]the NAS list[/ds4:sensitive]")),
        message(3, "user", TextBlock(text="now run the tests")),
    )
    calls = _counting_privacy(monkeypatch)
    with ScriptedServer() as server:
        server.on("POST", "/v1/chat/completions", Reply(body=OPENAI_CHAT_ANSWER))
        reused = _chat(server)
        results = [_complete(reused, _request(messages=history[:size])) for size in (2, 3, 3)]
        fresh = [_complete(_chat(server), _request(messages=history[:size])) for size in (2, 3, 3)]
        bodies = [request.body for request in server.requests]
    assert calls == ["openai"] * 6
    assert bodies[:3] == bodies[3:]
    assert [result.privacy for result in results] == [result.privacy for result in fresh]
    assert results[2].privacy.secret_redactions == 1
    assert results[2].privacy.blocked_blocks == 1
    assert SECRET not in b"".join(bodies).decode()
    cache = reused._privacy_cache
    # The first call screens 2 messages, the second only the new one, the third none.
    assert (cache.hits, cache.misses) == (2 + 3, 2 + 1)


def test_an_adapter_send_over_a_transport_enforces_privacy_exactly_once(monkeypatch):
    calls = _counting_privacy(monkeypatch)

    def enforce(request):  # the adapter's own enforce_privacy, as PiSessionAdapter does it
        calls.append(request.provider)
        return enforce_payload_privacy(dict(request.payload), provider=request.provider)

    with ScriptedServer() as server:
        server.on("POST", "/v1/chat/completions", Reply(body=OPENAI_CHAT_ANSWER))
        request = CompletionRequest(
            provider="openai",
            model="gpt-4o-mini",
            payload={"messages": to_openai_chat(_secret_conversation())},
        )
        transport = _chat(server)
        result = run_closing(
            transport,
            lambda: complete_with_guards(
                request,
                closed=False,
                enforce_privacy=enforce,
                transport=transport.payload_transport(),
                diagnostics=DiagnosticsBuffer(),
            ),
        )
        body = server.requests[0].body.decode()
    assert isinstance(result, CompletionCompleted)
    assert calls == ["openai"]
    assert SECRET not in body


def test_the_adapter_boundary_refuses_messages_it_would_have_to_convert_without_privacy():
    with ScriptedServer() as server:
        server.on("POST", "/v1/chat/completions", Reply(body=OPENAI_CHAT_ANSWER))
        send = _chat(server).payload_transport()
        with pytest.raises(ProviderTransportError) as caught:
            anyio.run(send, _request(messages=_secret_conversation()))
        assert server.requests == []
    assert caught.value.failure.kind == "invalid-request"


def test_a_sender_built_payload_goes_through_the_same_transport_path(monkeypatch):
    calls = _counting_privacy(monkeypatch)
    with ScriptedServer() as server:
        server.on("POST", "/v1/chat/completions", Reply(body=OPENAI_CHAT_ANSWER))
        plan = plan_context(_secret_conversation(), model=model())
        request = CompletionRequest.from_plan(plan, model=model(), payload_format="openai-chat")
        result = _complete(_chat(server), request)
        sent = server.requests[0].json()
    assert isinstance(result, CompletionCompleted)
    assert calls == ["openai"]
    assert sent["model"] == "gpt-4o-mini"
    assert_accepted_by(completion_create_params.CompletionCreateParamsNonStreaming, sent)
    assert SECRET not in json.dumps(sent)


def test_a_request_with_both_messages_and_a_payload_is_invalid_and_not_sent():
    with ScriptedServer() as server:
        server.on("POST", "/v1/chat/completions", Reply(body=OPENAI_CHAT_ANSWER))
        request = msgspec.structs.replace(_request(), payload={"messages": []})
        result = _complete(_chat(server), request)
        assert server.requests == []
    assert isinstance(result, CompletionFallback)
    assert (result.code, result.retryable) == ("invalid-request", False)
