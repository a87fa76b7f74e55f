"""What each transport can do, answerable without creating a client or touching the network."""

from __future__ import annotations

from typing import Final

import msgspec

from ._errors import ProviderConfigurationError, escape_echo

__all__ = [
    "TRANSPORT_IDS",
    "TransportCapabilities",
    "TransportDescriptor",
    "describe_transport",
    "list_transports",
]

TRANSPORT_IDS: Final = ("anthropic-messages", "openai-chat", "openai-compatible", "openai-responses")


class TransportCapabilities(msgspec.Struct, frozen=True, kw_only=True):
    streaming: bool
    tool_calls: bool
    provider_continuation: bool
    prompt_cache_breakpoints: bool
    usage_reporting: bool
    local: bool


class TransportDescriptor(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    label: str
    transport: str
    endpoint: str
    api_key_env: str | None
    capabilities: TransportCapabilities


_DESCRIPTORS: Final = (
    TransportDescriptor(
        id="anthropic-messages",
        label="Anthropic Messages",
        transport="AnthropicMessagesTransport",
        endpoint="POST /v1/messages",
        api_key_env="ANTHROPIC_API_KEY",
        capabilities=TransportCapabilities(
            streaming=True,
            tool_calls=True,
            provider_continuation=False,
            prompt_cache_breakpoints=True,
            usage_reporting=True,
            local=False,
        ),
    ),
    TransportDescriptor(
        id="openai-chat",
        label="OpenAI Chat Completions",
        transport="OpenAIChatTransport",
        endpoint="POST /v1/chat/completions",
        api_key_env="OPENAI_API_KEY",
        capabilities=TransportCapabilities(
            streaming=True,
            tool_calls=True,
            provider_continuation=False,
            prompt_cache_breakpoints=False,
            usage_reporting=True,
            local=False,
        ),
    ),
    TransportDescriptor(
        id="openai-compatible",
        label="OpenAI-compatible local server (Ollama, LM Studio, llama.cpp, vLLM)",
        transport="OpenAIChatTransport via local_provider_transport()",
        endpoint="POST <base>/v1/chat/completions",
        api_key_env=None,
        capabilities=TransportCapabilities(
            streaming=True,
            tool_calls=True,
            provider_continuation=False,
            prompt_cache_breakpoints=False,
            usage_reporting=True,
            local=True,
        ),
    ),
    TransportDescriptor(
        id="openai-responses",
        label="OpenAI Responses",
        transport="OpenAIResponsesTransport",
        endpoint="POST /v1/responses",
        api_key_env="OPENAI_API_KEY",
        capabilities=TransportCapabilities(
            streaming=True,
            tool_calls=True,
            provider_continuation=True,
            prompt_cache_breakpoints=False,
            usage_reporting=True,
            local=False,
        ),
    ),
)


def list_transports() -> tuple[TransportDescriptor, ...]:
    """Every transport with its capabilities, in :data:`TRANSPORT_IDS` order."""
    return _DESCRIPTORS


def describe_transport(transport_id: str) -> TransportDescriptor:
    """One transport's descriptor; an unknown id raises ``provider-unknown-transport``."""
    for descriptor in _DESCRIPTORS:
        if descriptor.id == transport_id:
            return descriptor
    shown = escape_echo(transport_id) if isinstance(transport_id, str) else type(transport_id).__name__
    raise ProviderConfigurationError(
        "provider-unknown-transport", f"unknown transport {shown}; known: {', '.join(TRANSPORT_IDS)}"
    )
