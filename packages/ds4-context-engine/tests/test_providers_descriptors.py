import socket

import pytest

from ds4_context_engine.providers import (
    PROVIDER_CONFIGURATION_ERROR_CODES,
    TRANSPORT_IDS,
    OpenAIChatTransport,
    ProviderConfigurationError,
    describe_transport,
    list_transports,
)
from ds4_context_engine.providers._convert import interop_converter


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


def test_a_missing_converter_is_a_coded_error():
    with pytest.raises(ProviderConfigurationError) as caught:
        interop_converter("to_carrier_pigeon")
    assert caught.value.code == "provider-interop-unavailable"
