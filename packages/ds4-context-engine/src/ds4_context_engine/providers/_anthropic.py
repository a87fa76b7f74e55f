"""Anthropic Messages, with prompt-cache breakpoints on the plan's stable prefix."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Final

import httpx
import msgspec

from ds4_context_core import CanonicalMessage
from ds4_context_core.adapter import (
    INTEROP_CONVERTERS,
    CompletionFailure,
    CompletionRequest,
    CompletionUsage,
    InteropFormat,
    MessageConverter,
)
from ds4_context_core.privacy import PrivacyPolicy

from ._sse import SseEvent
from ._streaming import StreamAssembler, StreamEvent, TextDelta, ToolCallDelta, stream_error
from ._token_count import TokenCount, estimated_count
from ._transport import (
    DEFAULT_REQUEST_TIMEOUT_S,
    HttpTransport,
    ProviderResponseError,
    UsageCallback,
    answer_as,
)
from ._types import CompletionOutput, OutputToolCall

__all__ = [
    "ANTHROPIC_API_VERSION",
    "ANTHROPIC_COUNT_TOKENS_PATH",
    "ANTHROPIC_DEFAULT_BASE_URL",
    "ANTHROPIC_DEFAULT_MAX_TOKENS",
    "ANTHROPIC_MAX_CACHE_BREAKPOINTS",
    "AnthropicMessagesTransport",
]

ANTHROPIC_DEFAULT_BASE_URL: Final = "https://api.anthropic.com/v1"
ANTHROPIC_API_VERSION: Final = "2023-06-01"
ANTHROPIC_DEFAULT_MAX_TOKENS: Final = 4096
ANTHROPIC_MAX_CACHE_BREAKPOINTS: Final = 4
ANTHROPIC_COUNT_TOKENS_PATH: Final = "/messages/count_tokens"
# What the count-tokens endpoint takes of a Messages payload (it refuses max_tokens, stream, ...).
_COUNTED_KEYS: Final = frozenset({"model", "messages", "system", "tools", "tool_choice", "thinking"})
_EPHEMERAL: Final = {"type": "ephemeral"}


class _ContentBlock(msgspec.Struct):
    type: str
    text: str | None = None
    id: str | None = None
    name: str | None = None
    input: dict[str, Any] | None = None
    # set by the stream assembler when the streamed input JSON did not decode to an object
    ds4_input_error: str | None = None


class _Usage(msgspec.Struct):
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


class _CountResponse(msgspec.Struct):
    input_tokens: int


class _MessageResponse(msgspec.Struct):
    id: str
    content: list[_ContentBlock]
    model: str | None = None
    stop_reason: str | None = None
    usage: _Usage | None = None


# Overloaded and internal errors go away on their own; a bad request mid-stream does not.
_TRANSIENT_STREAM_ERRORS: Final = frozenset(
    {"overloaded_error", "api_error", "rate_limit_error", "timeout_error"}
)


class _MessagesStream:
    """Messages API events until ``message_stop``, assembled into one ``message``."""

    def __init__(self) -> None:
        self.done = False
        self._message: dict[str, Any] = {}
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, list[str]] = {}
        self._usage: dict[str, Any] = {}
        self._stop: Any = None

    def feed(self, event: SseEvent) -> list[StreamEvent]:
        data = msgspec.json.decode(event.data)
        if not isinstance(data, dict):
            raise TypeError("a stream event is not an object")
        kind = data.get("type") or event.event
        if kind == "message_start":
            self._message = dict(data["message"])
            self._usage.update(self._message.get("usage") or {})
        elif kind == "content_block_start":
            return self._start(int(data["index"]), data["content_block"])
        elif kind == "content_block_delta":
            return self._delta(int(data["index"]), data["delta"])
        elif kind == "message_delta":
            self._stop = (data.get("delta") or {}).get("stop_reason", self._stop)
            self._usage.update(data.get("usage") or {})
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            error_type = (data.get("error") or {}).get("type")
            raise stream_error(error_type, transient=error_type in _TRANSIENT_STREAM_ERRORS)
        return []

    def _start(self, index: int, block: dict[str, Any]) -> list[StreamEvent]:
        self._blocks[index] = dict(block)
        if block.get("type") == "tool_use":
            self._json[index] = []
            return [ToolCallDelta(index=index, id=block.get("id"), name=block.get("name"))]
        if block.get("type") == "text" and block.get("text"):
            return [TextDelta(text=block["text"])]
        return []

    def _delta(self, index: int, delta: dict[str, Any]) -> list[StreamEvent]:
        block = self._blocks[index]
        if delta.get("type") == "text_delta":
            text = delta["text"]
            block["text"] = block.get("text", "") + text
            return [TextDelta(text=text)]
        if delta.get("type") == "input_json_delta":
            part = delta["partial_json"]
            self._json[index].append(part)
            return [ToolCallDelta(index=index, arguments=part)]
        return []  # thinking and signature deltas are not shown

    def final_body(self) -> Any:
        content = []
        for index, block in sorted(self._blocks.items()):
            finished = block
            if block.get("type") == "tool_use" and index in self._json:
                finished = {**block, **_streamed_input("".join(self._json[index]))}
            content.append(finished)
        return {**self._message, "content": content, "stop_reason": self._stop, "usage": self._usage}


def _streamed_input(raw: str) -> dict[str, Any]:
    """A tool_use block's streamed input; text that is not a JSON object is reported, not raised."""
    if not raw.strip():
        return {"input": {}}
    try:
        decoded = msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return {"input": {}, "ds4_input_error": "tool-arguments-invalid-json"}
    if not isinstance(decoded, dict):
        return {"input": {}, "ds4_input_error": "tool-arguments-not-object"}
    return {"input": decoded}


def _as_blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return content
    raise TypeError("message content must be a string or a list of blocks")


class AnthropicMessagesTransport(HttpTransport):
    """``POST {base_url}/messages`` (non-streaming).

    ``request.system`` and the canonical ``system`` messages (lifted by the converter) become the
    top-level ``system`` blocks. Cache
    breakpoints go on the last tool definition, the last system block and the last block of the plan's
    stable prefix (``request.stable_prefix_count`` messages): the parts that stay byte-identical from one
    call to the next, so Anthropic can serve them from its prompt cache.
    """

    endpoint_path: ClassVar[str] = "/messages"
    interop_format: ClassVar[InteropFormat] = "anthropic"

    def __init__(
        self,
        *,
        base_url: str = ANTHROPIC_DEFAULT_BASE_URL,
        provider: str = "anthropic",
        api_key: str | None = None,
        api_key_env: str | None = "ANTHROPIC_API_KEY",
        client: httpx.AsyncClient | None = None,
        timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        privacy_policy: PrivacyPolicy | None = None,
        on_usage: UsageCallback | None = None,
        extra_headers: dict[str, str] | None = None,
        cache_prefix: bool = True,
        converter: MessageConverter | None = None,
    ) -> None:
        super().__init__(
            base_url=base_url,
            provider=provider,
            api_key=api_key,
            api_key_env=api_key_env,
            client=client,
            timeout_s=timeout_s,
            privacy_policy=privacy_policy,
            on_usage=on_usage,
            extra_headers=extra_headers,
        )
        self._cache_prefix = cache_prefix
        self._converter = converter

    def auth_headers(self, api_key: str | None) -> dict[str, str]:
        headers = {"anthropic-version": ANTHROPIC_API_VERSION}
        if api_key:
            headers["x-api-key"] = api_key
        return headers

    def _convert(
        self, messages: Sequence[CanonicalMessage]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """``(system blocks, messages)``; the converter lifts canonical system messages into ``system``."""
        converter = self._converter or INTEROP_CONVERTERS[self.interop_format]
        # Converted parts may share objects with canonical messages: nothing below mutates them in place.
        converted = converter(messages)
        if isinstance(converted, list):  # a converter that has no system prompt to lift
            return [], list(converted)
        system = converted.get("system")
        if isinstance(system, str):
            system_blocks = [{"type": "text", "text": system}] if system else []
        elif isinstance(system, list):
            system_blocks = list(system)
        elif system is None:
            system_blocks = []
        else:
            raise TypeError("the converted system prompt must be text or a list of blocks")
        messages_out = converted.get("messages")
        if not isinstance(messages_out, list):
            raise TypeError("the converter returned no message list")
        return system_blocks, list(messages_out)

    def _place_prefix_breakpoint(
        self, converted: list[dict[str, Any]], messages: Sequence[CanonicalMessage], prefix_count: int
    ) -> bool:
        """Mark the end of the stable prefix, found by converting the prefix alone.

        The converter may merge neighbouring messages (tool results join the next user turn), so canonical
        index ``n`` is not converted index ``n``. If the prefix's conversion is not a prefix of the whole
        conversion, no breakpoint is placed: a missing breakpoint costs money, a wrong one nothing worse.
        """
        _, prefix = self._convert(messages[:prefix_count])
        if not prefix or len(prefix) > len(converted):
            return False
        last = len(prefix) - 1
        if prefix[:last] != converted[:last]:
            return False
        head, whole = prefix[last], converted[last]
        if head.get("role") != whole.get("role"):
            return False
        head_blocks, whole_blocks = _as_blocks(head.get("content")), list(_as_blocks(whole.get("content")))
        if not head_blocks or whole_blocks[: len(head_blocks)] != head_blocks:
            return False
        target = whole_blocks[len(head_blocks) - 1]
        if not isinstance(target, dict) or target.get("type") in ("thinking", "redacted_thinking"):
            return False
        whole_blocks[len(head_blocks) - 1] = {**target, "cache_control": dict(_EPHEMERAL)}
        converted[last] = {**whole, "content": whole_blocks}
        return True

    def build_payload(self, request: CompletionRequest) -> dict[str, Any]:
        lifted, converted = self._convert(request.messages)
        system_blocks: list[dict[str, Any]] = (
            [{"type": "text", "text": request.system}] if request.system else []
        )
        system_blocks.extend(lifted)
        limit = request.model_descriptor.max_tokens if request.model_descriptor is not None else None
        max_tokens = request.max_output_tokens or limit or ANTHROPIC_DEFAULT_MAX_TOKENS
        payload: dict[str, Any] = {"model": request.model, "max_tokens": max_tokens, "messages": converted}
        if request.temperature is not None:
            payload["temperature"] = request.temperature
        tools = [
            {"name": tool.name, "description": tool.description, "input_schema": tool.parameters}
            for tool in request.tools
        ]
        if self._cache_prefix:
            if tools:
                tools[-1]["cache_control"] = dict(_EPHEMERAL)
            if system_blocks:
                system_blocks[-1] = {**system_blocks[-1], "cache_control": dict(_EPHEMERAL)}
            if 0 < request.stable_prefix_count <= len(request.messages):
                self._place_prefix_breakpoint(converted, request.messages, request.stable_prefix_count)
        if system_blocks:
            payload["system"] = system_blocks
        if tools:
            payload["tools"] = tools
        return payload

    def stream_assembler(self) -> StreamAssembler:
        return _MessagesStream()

    async def count_tokens(
        self, request: CompletionRequest, *, calibration_ratio: float | None = None
    ) -> TokenCount:
        """``request``'s exact input tokens from ``POST {base_url}/messages/count_tokens``.

        The payload is the one :meth:`complete` would send (same conversion, privacy enforced on it
        right before sending), without the keys the endpoint refuses. Never raises: a request that does
        not convert, privacy failing closed, the network, an error status or an answer without an
        ``input_tokens`` count give the calibrated estimate (``calibration_ratio``, else the model's
        prior) with a warning code instead.
        """

        def fallback(code: Any, detail: str) -> TokenCount:
            return estimated_count(
                self, request, calibration_ratio=calibration_ratio, warning=code, detail=detail
            )

        try:
            if not request.messages:
                raise ValueError("no canonical messages to count")
            built = self._wire_payload(request)
            payload = {key: value for key, value in built.items() if key in _COUNTED_KEYS}
        except Exception as error:
            return fallback("token-count-request-invalid", type(error).__name__)
        try:
            sanitized = self._enforce_privacy(payload)
        except Exception as error:
            return fallback("token-count-privacy-failed", type(error).__name__)
        prepared = self._prepare(sanitized.payload)
        if isinstance(prepared, CompletionFailure):
            return fallback("token-count-request-invalid", prepared.kind)
        outcome = await self._post(*prepared, path=ANTHROPIC_COUNT_TOKENS_PATH)
        if isinstance(outcome, CompletionFailure):
            status = f" {outcome.http_status}" if outcome.http_status else ""
            code = (
                "token-count-answer-invalid" if outcome.kind == "invalid-response" else "token-count-failed"
            )
            return fallback(code, f"{outcome.kind}{status}")
        try:
            counted = msgspec.convert(outcome, _CountResponse).input_tokens
        except (msgspec.ValidationError, RecursionError):
            counted = -1
        if type(counted) is not int or counted < 0:
            return fallback("token-count-answer-invalid", "no non-negative integer input_tokens")
        estimate = estimated_count(self, request, calibration_ratio=calibration_ratio)
        return msgspec.structs.replace(estimate, input_tokens=counted, exact=True, source="count-tokens")

    def parse_response(self, body: Any) -> tuple[CompletionOutput, CompletionUsage | None]:
        response = answer_as(body, _MessageResponse)
        texts: list[str] = []
        calls: list[OutputToolCall] = []
        for block in response.content:
            if block.type == "text":
                texts.append(block.text or "")
            elif block.type == "tool_use":
                if not block.id or not block.name:
                    raise ProviderResponseError(
                        "provider-response-invalid", "a tool_use block has no id or name"
                    )
                calls.append(
                    OutputToolCall(
                        id=block.id,
                        name=block.name,
                        arguments=block.input or {},
                        arguments_error=block.ds4_input_error,
                    )
                )
        usage = None
        if response.usage is not None:
            cache_read = response.usage.cache_read_input_tokens or 0
            cache_write = response.usage.cache_creation_input_tokens or 0
            # Anthropic counts cached input separately; our input_tokens is the whole prompt.
            usage = CompletionUsage(
                input_tokens=response.usage.input_tokens + cache_read + cache_write,
                output_tokens=response.usage.output_tokens,
                cache_read_input_tokens=cache_read,
                cache_creation_input_tokens=cache_write,
            )
        output = CompletionOutput(
            text="".join(texts),
            tool_calls=tuple(calls),
            stop_reason=response.stop_reason,
            response_id=response.id,
            model=response.model,
        )
        return output, usage
