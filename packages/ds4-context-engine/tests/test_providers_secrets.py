"""Secrets never leave through errors: base URL refusals and transport requests that cannot be encoded."""

import re
import traceback

import anyio
import httpx
import pytest
from _http_servers import Reply, ScriptedServer
from _provider_fixtures import OPENAI_CHAT_ANSWER, conversation, message, model

from ds4_context_core import TextBlock
from ds4_context_core.adapter import CompletionRequest
from ds4_context_engine.providers import (
    AnthropicMessagesTransport,
    LocalProviderError,
    OpenAIChatTransport,
    ProviderTransportError,
    parse_local_provider,
    validate_provider_base_url,
)

SECRET = "S3CRET"


def _chain(error: BaseException) -> list[BaseException]:
    """``error`` and every exception reachable through ``__cause__`` and ``__context__``."""
    seen: list[BaseException] = []
    pending: list[BaseException | None] = [error]
    while pending:
        current = pending.pop()
        if current is None or any(current is known for known in seen):
            continue
        seen.append(current)
        pending += [current.__cause__, current.__context__]
    return seen


def _assert_no_secret_in(error: BaseException, secret: str = SECRET) -> None:
    for link in _chain(error):
        assert secret not in str(link)
        assert secret not in repr(link)
        assert secret not in repr(link.args)
        assert secret not in repr(getattr(link, "object", ""))
    assert secret not in "".join(traceback.format_exception(error))


# --- base URL errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "trusted", "code", "echoed"),
    [
        (
            "http://admin:S3CRETPASS@localhost:11434",
            False,
            "local-provider-invalid-base-url",
            "http://localhost:11434",
        ),
        ("http://S3CRETTOKEN@localhost", False, "local-provider-invalid-base-url", "http://localhost"),
        ("http://user:S3CRET PASS@localhost", False, "local-provider-invalid-base-url", "http://localhost"),
        (
            "http://user:S3CRET\tPASS@127.0.0.1:8000",
            False,
            "local-provider-invalid-base-url",
            "http://127.0.0.1:8000",
        ),
        (
            "https://proxy.example.com/v1?api_key=sk-S3CRETKEY",
            True,
            "local-provider-invalid-base-url",
            "https://proxy.example.com",
        ),
        (
            "http://localhost:11434/v1#tok=S3CRETTOK",
            False,
            "local-provider-invalid-base-url",
            "http://localhost:11434",
        ),
        ("http://[::1]:8000/v1?key=S3CRET", False, "local-provider-invalid-base-url", "http://[::1]:8000"),
        ("http://S3CRET#x@localhost", False, "local-provider-invalid-base-url", None),
        ("http://user:S3CRET/x@localhost", False, "local-provider-invalid-base-url", None),
        ("ftp://user:S3CRET@localhost", False, "local-provider-invalid-base-url", None),
        ("user:S3CRET@localhost", False, "local-provider-invalid-base-url", None),
        (
            "https://user:S3CRET@gpu.example.com",
            True,
            "local-provider-invalid-base-url",
            "https://gpu.example.com",
        ),
        (
            "https://gpu.example.com/S3CRET-path",
            False,
            "local-provider-public-host-untrusted",
            "https://gpu.example.com",
        ),
        (
            "http://gpu.example.com/v1/S3CRET",
            True,
            "local-provider-public-host-needs-https",
            "http://gpu.example.com",
        ),
    ],
)
def test_base_url_errors_echo_at_most_scheme_host_and_port(url, trusted, code, echoed):
    for refuse in (
        lambda: validate_provider_base_url(url, trusted=trusted),
        lambda: parse_local_provider(
            {"id": "o", "type": "openai_compat", "baseUrl": url, "trusted": trusted}
        ),
    ):
        with pytest.raises(LocalProviderError) as caught:
            refuse()
        assert caught.value.code == code
        _assert_no_secret_in(caught.value)
        quoted = re.findall(r'base URL "([^"]*)"', str(caught.value))
        assert quoted == ([] if echoed is None else [echoed])


def test_a_valid_base_url_still_keeps_its_path():
    assert validate_provider_base_url("http://localhost:11434/v1/") == "http://localhost:11434/v1"


# --- transport: requests that cannot be encoded -------------------------------------------------------

NON_ASCII_KEY = "sk-S3CRETKEY\u00e9"


def _request(**kwargs):
    messages = kwargs.pop("messages", conversation())
    return CompletionRequest.from_messages(messages, model=kwargs.pop("model", model()), **kwargs)


def _assert_invalid_request_fallback(result, server, secret=SECRET):
    assert server.requests == []
    assert result.status == "fallback"
    assert result.code == "invalid-request"
    assert result.retryable is False
    assert result.failure is not None
    assert result.failure.kind == "invalid-request"
    assert secret not in repr(result)
    assert "\u00e9" not in repr(result)


@pytest.mark.parametrize(
    "make",
    [
        lambda url: OpenAIChatTransport(base_url=url + "/v1", api_key=NON_ASCII_KEY, api_key_env=None),
        lambda url: AnthropicMessagesTransport(base_url=url + "/v1", api_key=NON_ASCII_KEY, api_key_env=None),
        lambda url: OpenAIChatTransport(
            base_url=url + "/v1", api_key_env=None, extra_headers={"X-Token": NON_ASCII_KEY}
        ),
    ],
    ids=["openai-key", "anthropic-key", "extra-header"],
)
def test_a_non_ascii_key_is_an_invalid_request_fallback_and_nothing_is_sent(make):
    with ScriptedServer() as server:
        server.on("POST", "/v1/chat/completions", Reply(body=OPENAI_CHAT_ANSWER))
        server.on("POST", "/v1/messages", Reply(body={}))
        result = anyio.run(make(server.url).complete, _request())
        assert server.requests == []
    _assert_invalid_request_fallback(result, server)
    assert result.failure.reason == "the request could not be encoded (UnicodeEncodeError)"


def test_a_non_ascii_key_from_the_environment_is_refused_the_same_way(monkeypatch):
    monkeypatch.setenv("DS4_SECRETS_TEST_KEY", NON_ASCII_KEY)
    with ScriptedServer() as server:
        server.on("POST", "/v1/chat/completions", Reply(body=OPENAI_CHAT_ANSWER))
        transport = OpenAIChatTransport(base_url=server.url + "/v1", api_key_env="DS4_SECRETS_TEST_KEY")
        result = anyio.run(transport.complete, _request())
    _assert_invalid_request_fallback(result, server)


def test_a_key_with_a_line_break_is_refused_before_any_connection():
    with ScriptedServer() as server:
        server.on("POST", "/v1/chat/completions", Reply(body=OPENAI_CHAT_ANSWER))
        transport = OpenAIChatTransport(base_url=server.url + "/v1", api_key="sk-S3CRET\n", api_key_env=None)
        result = anyio.run(transport.complete, _request())
    _assert_invalid_request_fallback(result, server)


def test_an_unencodable_payload_is_an_invalid_request_fallback_and_nothing_is_sent():
    # A lone surrogate passes conversion and privacy but is not UTF-8: the JSON encoder refuses it.
    unencodable = _request(messages=(message(1, "user", TextBlock(text="S3CRET-TEXT \ud800")),))
    with ScriptedServer() as server:
        server.on("POST", "/v1/chat/completions", Reply(body=OPENAI_CHAT_ANSWER))
        transport = OpenAIChatTransport(base_url=server.url + "/v1", api_key="k", api_key_env=None)
        result = anyio.run(transport.complete, unencodable)
    _assert_invalid_request_fallback(result, server)
    assert result.failure.reason == "the request could not be encoded (UnicodeEncodeError)"


def test_a_shared_client_is_not_called_either():
    calls = []

    def record(request):
        calls.append(request)
        return httpx.Response(200, json=OPENAI_CHAT_ANSWER)

    async def main():
        async with httpx.AsyncClient(transport=httpx.MockTransport(record)) as client:
            transport = OpenAIChatTransport(
                base_url="http://127.0.0.1:9/v1", api_key=NON_ASCII_KEY, api_key_env=None, client=client
            )
            return await transport.complete(_request())

    result = anyio.run(main)
    assert calls == []
    assert result.code == "invalid-request"


@pytest.mark.parametrize(
    ("key", "payload"),
    [
        (NON_ASCII_KEY, {"messages": []}),
        ("k", {"messages": [{"role": "user", "content": "S3CRET \ud800"}]}),
    ],
    ids=["non-ascii-key", "unencodable-payload"],
)
def test_the_adapter_boundary_raises_a_coded_error_with_nothing_chained(key, payload):
    with ScriptedServer() as server:
        server.on("POST", "/v1/chat/completions", Reply(body=OPENAI_CHAT_ANSWER))
        send = OpenAIChatTransport(
            base_url=server.url + "/v1", api_key=key, api_key_env=None
        ).payload_transport()
        request = CompletionRequest(provider="openai", model="gpt-4o-mini", payload=payload)
        with pytest.raises(ProviderTransportError) as caught:
            anyio.run(send, request)
        assert server.requests == []
    assert caught.value.failure.kind == "invalid-request"
    assert caught.value.__cause__ is None
    assert caught.value.__context__ is None
    _assert_no_secret_in(caught.value)
    _assert_no_secret_in(caught.value, "\u00e9")
