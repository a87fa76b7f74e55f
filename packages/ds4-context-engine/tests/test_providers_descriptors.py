import socket

import pytest
from _provider_fixtures import conversation

from ds4_context_core.adapter import INTEROP_CONVERTERS, INTEROP_FORMATS
from ds4_context_core.interop import to_anthropic_messages, to_openai_chat, to_openai_responses
from ds4_context_engine.providers import (
    PROVIDER_CONFIGURATION_ERROR_CODES,
    TRANSPORT_IDS,
    AnthropicMessagesTransport,
    OpenAIChatTransport,
    OpenAIResponsesTransport,
    ProviderConfigurationError,
    describe_transport,
    list_transports,
)


def test_every_transport_is_described_in_id_order():
    assert tuple(d.id for d in list_transports()) == TRANSPORT_IDS
    assert describe_transport("openai-responses").capabilities.provider_continuation is True
    assert describe_transport("anthropic-messages").capabilities.prompt_cache_breakpoints is True
    assert describe_transport("openai-compatible").capabilities.local is True
    assert describe_transport("openai-chat").capabilities.provider_continuation is False


def test_capability_queries_never_touch_the_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a capability query opened a socket")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    assert len(list_transports()) == 4
    assert describe_transport("openai-chat").endpoint.endswith("/chat/completions")


@pytest.mark.parametrize("bad", ["openai", "", "x" * 500, 3])
def test_unknown_transport_is_a_coded_error(bad):
    with pytest.raises(ProviderConfigurationError) as caught:
        describe_transport(bad)
    assert caught.value.code == "provider-unknown-transport"
    assert "x" * 100 not in str(caught.value)


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"base_url": "ftp://127.0.0.1"}, "provider-invalid-base-url"),
        ({"base_url": ""}, "provider-invalid-base-url"),
        ({"provider": " "}, "provider-invalid-id"),
        ({"timeout_s": 0}, "provider-invalid-timeout"),
        ({"timeout_s": float("inf")}, "provider-invalid-timeout"),
    ],
)
def test_bad_transport_settings_are_refused(kwargs, code):
    with pytest.raises(ProviderConfigurationError) as caught:
        OpenAIChatTransport(**kwargs)
    assert caught.value.code == code
    assert code in PROVIDER_CONFIGURATION_ERROR_CODES


def test_each_transport_converts_through_the_typed_interop_registry():
    assert tuple(sorted(INTEROP_CONVERTERS)) == INTEROP_FORMATS
    expected = {
        OpenAIChatTransport: to_openai_chat,
        OpenAIResponsesTransport: to_openai_responses,
        AnthropicMessagesTransport: to_anthropic_messages,
    }
    for transport, direct in expected.items():
        converter = INTEROP_CONVERTERS[transport.interop_format]
        assert converter(conversation()) == direct(conversation())
