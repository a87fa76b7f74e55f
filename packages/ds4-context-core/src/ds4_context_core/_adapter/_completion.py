"""The parts of a completion shared by every sender: tools, usage, failures, continuation, interop formats.

They belong to the ``runtime-adapter-v1`` completion path (``ds4_context_core.adapter``): an adapter that
builds its own payload and the engine's HTTP transports send the same :class:`CompletionRequest` and
return the same :class:`CompletionResult`, so these records are defined once, here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final, Literal, Protocol, TypeAlias

import msgspec

from ds4_context_core._history._model import CanonicalMessage

__all__ = [
    "FAILURE_KINDS",
    "INTEROP_CONVERTERS",
    "INTEROP_FORMATS",
    "TRANSIENT_FAILURE_KINDS",
    "CompletionFailure",
    "CompletionUsage",
    "FailureKind",
    "InteropFormat",
    "MessageConverter",
    "ProviderContinuation",
    "ToolDefinition",
]

FAILURE_KINDS: Final = (
    "authentication",
    "client-error",
    "connection-error",
    "invalid-request",
    "invalid-response",
    "privacy-enforcement-failed",
    "rate-limited",
    "server-error",
    "timeout",
)
# Only these are worth another attempt: the same request may succeed a moment later.
TRANSIENT_FAILURE_KINDS: Final = ("connection-error", "rate-limited", "server-error", "timeout")

FailureKind: TypeAlias = Literal[
    "authentication",
    "client-error",
    "connection-error",
    "invalid-request",
    "invalid-response",
    "privacy-enforcement-failed",
    "rate-limited",
    "server-error",
    "timeout",
]

INTEROP_FORMATS: Final = ("anthropic", "openai-chat", "openai-responses")
InteropFormat: TypeAlias = Literal["anthropic", "openai-chat", "openai-responses"]
"""A provider wire format that ``ds4_context_core.interop`` converts canonical messages into."""


class MessageConverter(Protocol):
    """Canonical messages in, one provider format's message part out (plain JSON builtins)."""

    def __call__(self, messages: Sequence[CanonicalMessage], /) -> Any: ...


def _to_openai_chat(messages: Sequence[CanonicalMessage], /) -> Any:
    from ds4_context_core.interop import to_openai_chat  # noqa: PLC0415 - the interop module loads on first conversion

    return to_openai_chat(messages)


def _to_openai_responses(messages: Sequence[CanonicalMessage], /) -> Any:
    from ds4_context_core.interop import to_openai_responses  # noqa: PLC0415

    return to_openai_responses(messages)


def _to_anthropic_messages(messages: Sequence[CanonicalMessage], /) -> Any:
    from ds4_context_core.interop import to_anthropic_messages  # noqa: PLC0415

    return to_anthropic_messages(messages)


INTEROP_CONVERTERS: Final[Mapping[InteropFormat, MessageConverter]] = MappingProxyType(
    {
        "anthropic": _to_anthropic_messages,
        "openai-chat": _to_openai_chat,
        "openai-responses": _to_openai_responses,
    }
)
"""The one conversion per provider format: ``INTEROP_CONVERTERS["openai-chat"](messages)``."""


class ToolDefinition(msgspec.Struct, frozen=True, kw_only=True):
    """A tool offered to the model: name, description and JSON Schema of its arguments."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = msgspec.field(default_factory=lambda: {"type": "object", "properties": {}})


class ProviderContinuation(msgspec.Struct, frozen=True, kw_only=True):
    """Proof of what a provider has stored after a call, so the next call may send only what is new.

    ``prefix_hash`` covers the canonical messages that were sent, ``reply_hash`` the answer the provider
    stored after them, and ``settings_hash`` the model, system prompt, tools and privacy policy. A later
    request continues from ``response_id`` only if all three still match; otherwise it replays in full.
    """

    provider: str
    model: str
    response_id: str
    prefix_count: int
    prefix_hash: str
    reply_hash: str
    settings_hash: str


class CompletionUsage(msgspec.Struct, frozen=True, kw_only=True):
    """Token counts as the provider reported them (cache counts are 0 when not reported)."""

    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0


class CompletionFailure(msgspec.Struct, frozen=True, kw_only=True):
    """Why an attempt failed: metadata only, never a response body or request payload."""

    kind: FailureKind
    reason: str
    http_status: int | None = None
    retry_after_ms: int | None = None

    @property
    def transient(self) -> bool:
        """True when the same request may succeed a moment later (see ``TRANSIENT_FAILURE_KINDS``)."""
        return self.kind in TRANSIENT_FAILURE_KINDS
