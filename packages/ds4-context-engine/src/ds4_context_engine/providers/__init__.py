"""Provider-side names: model references, local provider discovery and HTTP transports.

A transport sends the core contract's ``CompletionRequest`` and returns its ``CompletionResult``
(``ds4_context_core.adapter``); ``CompletionFailure`` and the shared records are re-exported here.

The HTTP transports and local provider discovery (which need httpx) are imported on first use, so
parsing a model reference or reading the error types stays cheap.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from ds4_context_engine._exceptions import ProviderResponseError, ProviderTransportError
from ds4_context_engine._lazy import lazy_exports

from ._descriptors import (
    TRANSPORT_IDS,
    TransportCapabilities,
    TransportDescriptor,
    describe_transport,
    list_transports,
)
from ._errors import (
    ECHO_MAX_BYTES,
    PROVIDER_CONFIGURATION_ERROR_CODES,
    LocalProviderError,
    ModelReferenceError,
    ProviderConfigurationError,
)
from ._model_reference import (
    MODEL_REFERENCE_ERROR_CODES,
    MODEL_REFERENCE_MAX_BYTES,
    RETIRED_MODEL_ALIASES,
    ModelReference,
    parse_model_reference,
)

if TYPE_CHECKING:
    from ds4_context_core.adapter import CompletionFailure, MessageConverter

    from ._anthropic import (
        ANTHROPIC_API_VERSION,
        ANTHROPIC_COUNT_TOKENS_PATH,
        ANTHROPIC_DEFAULT_BASE_URL,
        ANTHROPIC_DEFAULT_MAX_TOKENS,
        ANTHROPIC_MAX_CACHE_BREAKPOINTS,
        AnthropicMessagesTransport,
    )
    from ._local import (
        DISCOVERY_CACHE_TTL_S,
        DISCOVERY_RESPONSE_MAX_BYTES,
        DISCOVERY_TIMEOUT_MS,
        LMSTUDIO_DEFAULT_BASE_URL,
        LOCAL_PROVIDER_ERROR_CODES,
        LOCAL_PROVIDER_TYPES,
        MAX_ADVERTISED_MODELS_DEFAULT,
        MAX_ADVERTISED_MODELS_LIMIT,
        OLLAMA_DEFAULT_BASE_URL,
        LocalProviderDefinition,
        LocalProviderDiscovery,
        LocalProviderModels,
        LocalProviderType,
        is_private_host,
        openai_api_root,
        parse_local_provider,
        validate_provider_base_url,
    )
    from ._openai import (
        OPENAI_DEFAULT_BASE_URL,
        OpenAIChatTransport,
        OpenAIResponsesTransport,
        local_provider_transport,
    )
    from ._overhead import request_overhead_tokens
    from ._streaming import StreamCallback, StreamEvent, TextDelta, ToolCallDelta, UsageReport
    from ._token_count import TOKEN_COUNT_SOURCES, TOKEN_COUNT_WARNING_CODES, TokenCount
    from ._transport import (
        DEFAULT_REQUEST_TIMEOUT_S,
        PROVIDER_RESPONSE_MAX_BYTES,
        HttpTransport,
        UsageCallback,
        parse_retry_after_ms,
    )
    from ._types import (
        FAILURE_KINDS,
        TRANSIENT_FAILURE_KINDS,
        CompletionOutput,
        CompletionUsage,
        FailureKind,
        OutputToolCall,
        ProviderContinuation,
        ToolDefinition,
        UsageObservation,
    )

__all__ = [
    "ANTHROPIC_API_VERSION",
    "ANTHROPIC_COUNT_TOKENS_PATH",
    "ANTHROPIC_DEFAULT_BASE_URL",
    "ANTHROPIC_DEFAULT_MAX_TOKENS",
    "ANTHROPIC_MAX_CACHE_BREAKPOINTS",
    "DEFAULT_REQUEST_TIMEOUT_S",
    "DISCOVERY_CACHE_TTL_S",
    "DISCOVERY_RESPONSE_MAX_BYTES",
    "DISCOVERY_TIMEOUT_MS",
    "ECHO_MAX_BYTES",
    "FAILURE_KINDS",
    "LMSTUDIO_DEFAULT_BASE_URL",
    "LOCAL_PROVIDER_ERROR_CODES",
    "LOCAL_PROVIDER_TYPES",
    "MAX_ADVERTISED_MODELS_DEFAULT",
    "MAX_ADVERTISED_MODELS_LIMIT",
    "MODEL_REFERENCE_ERROR_CODES",
    "MODEL_REFERENCE_MAX_BYTES",
    "OLLAMA_DEFAULT_BASE_URL",
    "OPENAI_DEFAULT_BASE_URL",
    "PROVIDER_CONFIGURATION_ERROR_CODES",
    "PROVIDER_RESPONSE_MAX_BYTES",
    "RETIRED_MODEL_ALIASES",
    "TOKEN_COUNT_SOURCES",
    "TOKEN_COUNT_WARNING_CODES",
    "TRANSIENT_FAILURE_KINDS",
    "TRANSPORT_IDS",
    "AnthropicMessagesTransport",
    "CompletionFailure",
    "CompletionOutput",
    "CompletionUsage",
    "FailureKind",
    "HttpTransport",
    "LocalProviderDefinition",
    "LocalProviderDiscovery",
    "LocalProviderError",
    "LocalProviderModels",
    "LocalProviderType",
    "MessageConverter",
    "ModelReference",
    "ModelReferenceError",
    "OpenAIChatTransport",
    "OpenAIResponsesTransport",
    "OutputToolCall",
    "ProviderConfigurationError",
    "ProviderContinuation",
    "ProviderResponseError",
    "ProviderTransportError",
    "StreamCallback",
    "StreamEvent",
    "TextDelta",
    "TokenCount",
    "ToolCallDelta",
    "ToolDefinition",
    "TransportCapabilities",
    "TransportDescriptor",
    "UsageCallback",
    "UsageObservation",
    "UsageReport",
    "describe_transport",
    "is_private_host",
    "list_transports",
    "local_provider_transport",
    "openai_api_root",
    "parse_local_provider",
    "parse_model_reference",
    "parse_retry_after_ms",
    "request_overhead_tokens",
    "validate_provider_base_url",
]

# The streaming events and the shared records are core's adapter contract (which loads the conformance
# kit and anyio): a command line that only parses --model needs none of it.
_LAZY_EXPORTS = {
    **dict.fromkeys(
        ("StreamCallback", "StreamEvent", "TextDelta", "ToolCallDelta", "UsageReport"), "_streaming"
    ),
    **dict.fromkeys(
        (
            "FAILURE_KINDS",
            "TRANSIENT_FAILURE_KINDS",
            "CompletionOutput",
            "CompletionUsage",
            "FailureKind",
            "OutputToolCall",
            "ProviderContinuation",
            "ToolDefinition",
            "UsageObservation",
        ),
        "_types",
    ),
    "ANTHROPIC_API_VERSION": "_anthropic",
    "ANTHROPIC_COUNT_TOKENS_PATH": "_anthropic",
    "ANTHROPIC_DEFAULT_BASE_URL": "_anthropic",
    "ANTHROPIC_DEFAULT_MAX_TOKENS": "_anthropic",
    "ANTHROPIC_MAX_CACHE_BREAKPOINTS": "_anthropic",
    "AnthropicMessagesTransport": "_anthropic",
    "DISCOVERY_CACHE_TTL_S": "_local",
    "DISCOVERY_RESPONSE_MAX_BYTES": "_local",
    "DISCOVERY_TIMEOUT_MS": "_local",
    "LMSTUDIO_DEFAULT_BASE_URL": "_local",
    "LOCAL_PROVIDER_ERROR_CODES": "_local",
    "LOCAL_PROVIDER_TYPES": "_local",
    "LocalProviderDefinition": "_local",
    "LocalProviderDiscovery": "_local",
    "LocalProviderModels": "_local",
    "LocalProviderType": "_local",
    "MAX_ADVERTISED_MODELS_DEFAULT": "_local",
    "MAX_ADVERTISED_MODELS_LIMIT": "_local",
    "OLLAMA_DEFAULT_BASE_URL": "_local",
    "is_private_host": "_local",
    "openai_api_root": "_local",
    "parse_local_provider": "_local",
    "validate_provider_base_url": "_local",
    "OPENAI_DEFAULT_BASE_URL": "_openai",
    "OpenAIChatTransport": "_openai",
    "OpenAIResponsesTransport": "_openai",
    "local_provider_transport": "_openai",
    "request_overhead_tokens": "_overhead",
    "TOKEN_COUNT_SOURCES": "_token_count",
    "TOKEN_COUNT_WARNING_CODES": "_token_count",
    "TokenCount": "_token_count",
    "DEFAULT_REQUEST_TIMEOUT_S": "_transport",
    "HttpTransport": "_transport",
    "PROVIDER_RESPONSE_MAX_BYTES": "_transport",
    "UsageCallback": "_transport",
    "parse_retry_after_ms": "_transport",
}

_CORE_ADAPTER_NAMES = frozenset({"CompletionFailure", "MessageConverter"})
_load = lazy_exports(__name__, _LAZY_EXPORTS, globals())


def __getattr__(name: str) -> Any:
    if name not in _CORE_ADAPTER_NAMES:
        return _load(name)
    value = getattr(import_module("ds4_context_core.adapter"), name)
    globals()[name] = value
    return value
