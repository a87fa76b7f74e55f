"""Anthropic's count-tokens endpoint as an optional exact count, and the fixed overhead of a request
(system prompt and tool schemas) measured from the payload each transport really sends."""

import json
import math

import pytest
from _http_servers import Reply, ScriptedServer, closed_port_url
from _provider_fixtures import assert_accepted_by, conversation, message, model, run_closing
from anthropic.types import message_count_tokens_params

from ds4_context_core import TextBlock, estimate_message_tokens
from ds4_context_core.adapter import CompletionRequest
from ds4_context_core.tokens import calibration_prior, estimate_text_tokens
from ds4_context_engine.providers import (
    TOKEN_COUNT_WARNING_CODES,
    AnthropicMessagesTransport,
    OpenAIChatTransport,
    OpenAIResponsesTransport,
    TokenCount,
    ToolDefinition,
    request_overhead_tokens,
)

CLAUDE = model("anthropic", "claude-sonnet-4-5")
TOOLS = (
    ToolDefinition(
        name="read",
        description="Read a file from the workspace.",
        parameters={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    ),
    ToolDefinition(
        name="bash",
        description="Run a shell command in the project root and return its output. " * 8,
        parameters={
            "type": "object",
            "properties": {"command": {"type": "string"}, "timeout": {"type": "integer"}},
            "required": ["command"],
        },
    ),
)
SYSTEM = "You are a careful coding agent. Read before you edit. " * 40


def _transport(url, **kwargs):
    return AnthropicMessagesTransport(base_url=url + "/v1", api_key="ant-test", api_key_env=None, **kwargs)


def _request(**kwargs):
    return CompletionRequest.from_messages(
        kwargs.pop("messages", conversation()), model=CLAUDE, system=SYSTEM, tools=TOOLS, **kwargs
    )


def _count(transport, request, **kwargs):
    async def call():
        return await transport.count_tokens(request, **kwargs)

    return run_closing(transport, call)


def test_the_count_comes_from_the_endpoint_with_the_payload_a_completion_would_send():
    with ScriptedServer() as server:
        server.on("POST", "/v1/messages/count_tokens", Reply(body={"input_tokens": 4321}))
        server.on("POST", "/v1/messages", Reply(status=500, body={}))
        transport = _transport(server.url)
        counted = _count(transport, _request())
        sent = server.requests[0]
        completion_payload = transport.build_payload(_request())
    assert isinstance(counted, TokenCount)
    assert (counted.input_tokens, counted.exact, counted.source, counted.warning) == (
        4321,
        True,
        "count-tokens",
        None,
    )
    assert sent.path == "/v1/messages/count_tokens"
    assert len(server.requests) == 1  # no completion was run
    assert sent.headers["x-api-key"] == "ant-test"
    assert sent.headers["anthropic-version"] == "2023-06-01"
    body = sent.json()
    assert_accepted_by(message_count_tokens_params.MessageCountTokensParams, body)
    assert "max_tokens" not in body
    assert body["messages"] == json.loads(json.dumps(completion_payload["messages"]))
    assert body["tools"][0]["input_schema"] == TOOLS[0].parameters
    assert body["system"][0]["text"] == SYSTEM
    # the estimate it would have used instead is reported beside it
    assert counted.estimated_tokens > sum(estimate_message_tokens(m) for m in conversation())


def _expected_estimate(transport, request, ratio):
    fixed = request_overhead_tokens(transport, model=CLAUDE, system=request.system, tools=request.tools)
    estimate = sum(estimate_message_tokens(m) for m in request.messages) + fixed
    return estimate, math.ceil(estimate * ratio)


@pytest.mark.parametrize(
    ("reply", "code"),
    [
        (Reply(status=500, body={"type": "error", "error": {"type": "api_error"}}), "token-count-failed"),
        (Reply(status=404, body={}), "token-count-failed"),
        (Reply(body={"input_tokens": "12"}), "token-count-answer-invalid"),
        (Reply(body={"input_tokens": -3}), "token-count-answer-invalid"),
        (Reply(body={"input_tokens": True}), "token-count-answer-invalid"),
        (Reply(body={}), "token-count-answer-invalid"),
        (Reply(raw=b"not json"), "token-count-answer-invalid"),
    ],
)
def test_a_failing_count_gives_the_calibrated_estimate_with_a_warning_code(reply, code):
    with ScriptedServer() as server:
        server.on("POST", "/v1/messages/count_tokens", reply)
        transport = _transport(server.url)
        counted = _count(transport, _request())
    prior = calibration_prior(CLAUDE).ratio
    estimate, scaled = _expected_estimate(transport, _request(), prior)
    assert code in TOKEN_COUNT_WARNING_CODES
    assert (counted.exact, counted.source, counted.warning) == (False, "estimate", code)
    assert (counted.estimated_tokens, counted.input_tokens, counted.calibration_ratio) == (
        estimate,
        scaled,
        prior,
    )
    assert "ant-test" not in (counted.detail or "")


def test_no_server_a_learnt_ratio_and_requests_that_cannot_be_sent_never_raise():
    transport = _transport(closed_port_url(), timeout_s=2)
    counted = _count(transport, _request(), calibration_ratio=1.3)
    estimate, scaled = _expected_estimate(transport, _request(), 1.3)
    assert (counted.warning, counted.input_tokens, counted.calibration_ratio) == (
        "token-count-failed",
        scaled,
        1.3,
    )
    assert counted.estimated_tokens == estimate
    empty = _count(transport, _request(messages=()))
    assert empty.warning == "token-count-request-invalid"

    def unserializable(messages):
        return {"messages": [{"role": "user", "content": object()}]}

    with ScriptedServer() as server:
        server.on("POST", "/v1/messages/count_tokens", Reply(body={"input_tokens": 1}))
        blocked = _count(_transport(server.url, converter=unserializable), _request())
        assert server.requests == []  # privacy failed closed: nothing left the machine
    assert blocked.warning == "token-count-privacy-failed"
    assert blocked.exact is False


@pytest.mark.parametrize(
    "make",
    [
        lambda: AnthropicMessagesTransport(api_key_env=None),
        lambda: OpenAIChatTransport(api_key_env=None),
        lambda: OpenAIResponsesTransport(api_key_env=None),
    ],
)
def test_the_fixed_overhead_is_measured_from_what_each_transport_sends(make):
    transport = make()
    assert request_overhead_tokens(transport, model=CLAUDE) == 0
    system_only = request_overhead_tokens(transport, model=CLAUDE, system=SYSTEM)
    with_tools = request_overhead_tokens(transport, model=CLAUDE, system=SYSTEM, tools=TOOLS)
    # the system prompt costs at least its own text; each tool at least its schema and description
    assert system_only >= estimate_text_tokens(SYSTEM)
    schemas = sum(estimate_text_tokens(json.dumps(t.parameters) + t.description) for t in TOOLS)
    assert with_tools - system_only >= schemas
    # what a request carrying only messages would cost on top is not part of the overhead
    request = CompletionRequest.from_messages(
        (message(1, "user", TextBlock(text="hi")),), model=CLAUDE, system=SYSTEM, tools=TOOLS
    )
    whole = estimate_text_tokens(json.dumps(transport.build_payload(request)))
    assert with_tools < whole
