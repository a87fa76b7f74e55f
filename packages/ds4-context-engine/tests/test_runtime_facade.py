import anyio
import pytest
from _http_servers import Reply, ScriptedServer
from _provider_fixtures import OPENAI_CHAT_ANSWER, conversation, model, run_closing

from ds4_context_core.adapter import (
    CompletionCompleted,
    CompletionFailure,
    CompletionRequest,
    completion_fallback,
)
from ds4_context_core.privacy import PrivacySummary
from ds4_context_engine.providers import OpenAIChatTransport, ProviderContinuation, ToolDefinition
from ds4_context_engine.runtime import AttemptPolicy, ProviderRuntime, RetryPolicy, RuntimeOptionsError

TOOLS = (ToolDefinition(name="read"), ToolDefinition(name="bash"), ToolDefinition(name="write"))


class Recorder:
    def __init__(self, *results):
        self.results = list(results)
        self.requests = []

    async def complete(self, request):
        self.requests.append(request)
        status = self.results.pop(0) if self.results else "completed"
        if status == "completed":
            privacy = PrivacySummary(
                provider=request.provider,
                destination="remote",
                changed=False,
                blocked_blocks=0,
                secret_redactions=0,
            )
            return CompletionCompleted(output=None, privacy=privacy)
        failure = CompletionFailure(kind="server-error", reason="HTTP 503", http_status=503)
        return completion_fallback("transport-failed", failure=failure)


def _request(**kwargs):
    return CompletionRequest.from_messages(conversation(), model=model(), tools=TOOLS, **kwargs)


def test_every_provider_in_the_chain_needs_a_transport():
    with pytest.raises(RuntimeOptionsError) as caught:
        ProviderRuntime({"openai": Recorder()}, ["openai:gpt-4o", "anthropic:claude-sonnet-4-5"])
    assert caught.value.code == "runtime-backend-unavailable"


def test_each_route_gets_its_own_model_and_filtered_tools_but_the_same_messages():
    openai_side, ollama_side = Recorder("fallback"), Recorder()

    def resolve(context):
        if context.entry.model.provider == "ollama":
            return {"allowed_tools": ["read", "bash"], "disallowed_tools": ["bash"]}
        return None

    runtime = ProviderRuntime(
        {"openai": openai_side, "ollama": ollama_side},
        ["openai:gpt-4o", "ollama:qwen2.5:7b"],
        resolve_attempt=resolve,
        retry_policy=RetryPolicy(initial_backoff_ms=0),
    )
    request = _request()
    routed = anyio.run(runtime.complete, request)
    assert routed.model.reference == "ollama:qwen2.5:7b"
    first, second = openai_side.requests[0], ollama_side.requests[0]
    assert (first.provider, first.model) == ("openai", "gpt-4o")
    assert (first.model_descriptor.provider, first.model_descriptor.id) == ("openai", "gpt-4o")
    assert [t.name for t in first.tools] == ["read", "bash", "write"]
    assert (second.provider, second.model) == ("ollama", "qwen2.5:7b")
    assert (second.model_descriptor.provider, second.model_descriptor.id) == ("ollama", "qwen2.5:7b")
    assert [t.name for t in second.tools] == ["read"]
    assert second.messages == request.messages
    assert second.model_descriptor.context_window == request.model_descriptor.context_window
    assert runtime.chain[1].model == "qwen2.5:7b"


def test_a_continuation_is_only_offered_to_the_route_it_belongs_to():
    openai_side, local_side = Recorder("fallback"), Recorder()
    continuation = ProviderContinuation(
        provider="openai",
        model="gpt-4o",
        response_id="resp_1",
        prefix_count=1,
        prefix_hash="a",
        reply_hash="b",
        settings_hash="c",
    )
    runtime = ProviderRuntime(
        {"openai": openai_side, "ollama": local_side},
        ["openai:gpt-4o", "ollama:llama3.2"],
        base_policy=AttemptPolicy(),
        retry_policy=RetryPolicy(initial_backoff_ms=0),
    )
    anyio.run(runtime.complete, _request(continuation=continuation))
    assert openai_side.requests[0].continuation == continuation
    assert local_side.requests[0].continuation is None


def test_facade_over_a_real_transport():
    with ScriptedServer() as server:
        server.on("POST", "/v1/chat/completions", Reply(body=OPENAI_CHAT_ANSWER))
        transport = OpenAIChatTransport(base_url=server.url + "/v1", api_key_env=None)
        runtime = ProviderRuntime({"openai": transport}, ["openai:gpt-4o-mini"])
        routed = run_closing(runtime, runtime.complete, _request())
        assert server.requests[0].json()["model"] == "gpt-4o-mini"
    assert routed.result.output.text == "The commands are demo, plan and status."
    assert routed.failovers == ()
