"""OpenAI Chat Completions, OpenAI Responses (with ``previous_response_id`` continuation), local servers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Final

import httpx
import msgspec

from ds4_context_core import CanonicalMessage, TextBlock, ToolCallBlock, stable_hash
from ds4_context_core.adapter import (
    INTEROP_CONVERTERS,
    CompletionCompleted,
    CompletionFallback,
    CompletionRequest,
    CompletionResult,
    CompletionUsage,
    InteropFormat,
    MessageConverter,
    ProviderContinuation,
    ToolDefinition,
)
from ds4_context_core.privacy import PrivacyPolicy, privacy_policy_version

from ._local import LocalProviderDefinition
from ._sse import SseEvent
from ._streaming import StreamAssembler, StreamCallback, StreamEvent, TextDelta, ToolCallDelta, stream_error
from ._transport import (
    DEFAULT_REQUEST_TIMEOUT_S,
    HttpTransport,
    ProviderResponseError,
    UsageCallback,
    answer_as,
)
from ._types import CompletionOutput, OutputToolCall

__all__ = [
    "OPENAI_DEFAULT_BASE_URL",
    "OpenAIChatTransport",
    "OpenAIResponsesTransport",
    "local_provider_transport",
]

OPENAI_DEFAULT_BASE_URL: Final = "https://api.openai.com/v1"


def _arguments(raw: object) -> tuple[dict[str, Any], str | None]:
    """The decoded arguments, or ``{}`` and a code when the model's text is not a JSON object."""
    if isinstance(raw, dict):
        return raw, None
    if not isinstance(raw, str):
        return {}, "tool-arguments-not-text"
    if not raw.strip():
        return {}, None
    try:
        decoded = msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return {}, "tool-arguments-invalid-json"
    if not isinstance(decoded, dict):
        return {}, "tool-arguments-not-object"
    return decoded, None


def _tool_call(call_id: str, name: str, raw: object) -> OutputToolCall:
    arguments, error = _arguments(raw)
    return OutputToolCall(id=call_id, name=name, arguments=arguments, arguments_error=error)


class _CachedTokensDetails(msgspec.Struct):
    """Chat's ``prompt_tokens_details`` and Responses' ``input_tokens_details`` (the same shape)."""

    cached_tokens: int | None = None


def _usage(input_tokens: int, output_tokens: int, details: _CachedTokensDetails | None) -> CompletionUsage:
    """Both OpenAI APIs count cached tokens inside the input tokens and report them in the details."""
    return CompletionUsage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cache_read_input_tokens=(details.cached_tokens or 0) if details else 0,
    )


# --- Chat Completions response shape (only the fields we read) ---------------------------------------


class _ChatFunction(msgspec.Struct):
    name: str
    arguments: str = ""


class _ChatToolCall(msgspec.Struct):
    id: str
    function: _ChatFunction
    type: str = "function"


class _ChatContentPart(msgspec.Struct):
    type: str
    text: str | None = None


class _ChatMessage(msgspec.Struct):
    content: str | list[_ChatContentPart] | None = None
    tool_calls: list[_ChatToolCall] | None = None
    refusal: str | None = None


class _ChatChoice(msgspec.Struct):
    message: _ChatMessage
    finish_reason: str | None = None


class _ChatUsage(msgspec.Struct):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_tokens_details: _CachedTokensDetails | None = None


class _ChatResponse(msgspec.Struct):
    choices: list[_ChatChoice]
    id: str | None = None
    model: str | None = None
    usage: _ChatUsage | None = None


def _chat_tools(tools: Sequence[ToolDefinition]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
        }
        for tool in tools
    ]


class OpenAIChatTransport(HttpTransport):
    """``POST {base_url}/chat/completions`` (non-streaming).

    Also the transport for OpenAI-compatible servers (Ollama, LM Studio, llama.cpp, vLLM): give their
    ``.../v1`` base URL, or use :func:`local_provider_transport`.
    """

    endpoint_path: ClassVar[str] = "/chat/completions"
    interop_format: ClassVar[InteropFormat] = "openai-chat"

    def __init__(
        self,
        *,
        base_url: str = OPENAI_DEFAULT_BASE_URL,
        provider: str = "openai",
        api_key: str | None = None,
        api_key_env: str | None = "OPENAI_API_KEY",
        client: httpx.AsyncClient | None = None,
        timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        privacy_policy: PrivacyPolicy | None = None,
        on_usage: UsageCallback | None = None,
        extra_headers: dict[str, str] | None = None,
        output_limit_field: str = "max_completion_tokens",
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
        self._output_limit_field = output_limit_field
        self._converter = converter

    def _convert(self, messages: Sequence[CanonicalMessage]) -> list[dict[str, Any]]:
        converter = self._converter or INTEROP_CONVERTERS[self.interop_format]
        return list(converter(messages))

    def build_payload(self, request: CompletionRequest) -> dict[str, Any]:
        messages = self._convert(request.messages)
        if request.system:
            messages.insert(0, {"role": "system", "content": request.system})
        payload: dict[str, Any] = {"model": request.model, "messages": messages, "stream": False}
        if request.max_output_tokens is not None:
            payload[self._output_limit_field] = request.max_output_tokens
        if request.temperature is not None:
            payload["temperature"] = request.temperature
        if request.tools:
            payload["tools"] = _chat_tools(request.tools)
        return payload

    def stream_payload(self, payload: dict[str, Any]) -> dict[str, Any]:
        # Without include_usage a streamed Chat answer carries no token counts at all.
        return {**payload, "stream": True, "stream_options": {"include_usage": True}}

    def stream_assembler(self) -> StreamAssembler:
        return _ChatStream()

    def parse_response(self, body: Any) -> tuple[CompletionOutput, CompletionUsage | None]:
        response = answer_as(body, _ChatResponse)
        if not response.choices:
            raise ProviderResponseError("provider-response-invalid", "the answer has no choices")
        choice = response.choices[0]
        content = choice.message.content
        if isinstance(content, list):
            text = "".join(part.text or "" for part in content if part.type in ("text", "output_text"))
        else:
            text = content or ""
        calls = tuple(
            _tool_call(call.id, call.function.name, call.function.arguments)
            for call in choice.message.tool_calls or ()
        )
        usage = None
        if response.usage is not None:
            reported = response.usage
            usage = _usage(reported.prompt_tokens, reported.completion_tokens, reported.prompt_tokens_details)
        output = CompletionOutput(
            text=text,
            tool_calls=calls,
            stop_reason=choice.finish_reason,
            response_id=response.id,
            model=response.model,
        )
        return output, usage


class _ChatDeltaFunction(msgspec.Struct):
    name: str | None = None
    arguments: str | None = None


class _ChatDeltaCall(msgspec.Struct):
    index: int
    id: str | None = None
    function: _ChatDeltaFunction | None = None


class _ChatDelta(msgspec.Struct):
    content: str | None = None
    tool_calls: list[_ChatDeltaCall] | None = None


class _ChatChunkChoice(msgspec.Struct):
    delta: _ChatDelta | None = None
    index: int = 0
    finish_reason: str | None = None


class _ChatChunk(msgspec.Struct):
    choices: list[_ChatChunkChoice] | None = None
    id: str | None = None
    model: str | None = None
    usage: dict[str, Any] | None = None
    error: Any = None


class _ChatStream:
    """``chat.completion.chunk`` events until ``data: [DONE]``, assembled into a ``chat.completion``."""

    def __init__(self) -> None:
        self.done = False
        self._id: str | None = None
        self._model: str | None = None
        self._text: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._finish: str | None = None
        self._usage: dict[str, Any] | None = None

    def feed(self, event: SseEvent) -> list[StreamEvent]:
        if event.data.strip() == "[DONE]":
            self.done = True
            return []
        chunk = msgspec.json.decode(event.data, type=_ChatChunk)
        if chunk.error is not None:
            error = chunk.error
            raise stream_error(error.get("type") or error.get("code") if isinstance(error, dict) else None)
        self._id = chunk.id or self._id
        self._model = chunk.model or self._model
        self._usage = chunk.usage or self._usage
        deltas: list[StreamEvent] = []
        for choice in chunk.choices or ():
            if choice.index != 0:
                continue  # one answer is asked for; another choice would be a second answer
            self._finish = choice.finish_reason or self._finish
            delta = choice.delta or _ChatDelta()
            if delta.content:
                self._text.append(delta.content)
                deltas.append(TextDelta(text=delta.content))
            for call in delta.tool_calls or ():
                slot = self._calls.setdefault(call.index, {"id": None, "name": "", "arguments": []})
                function = call.function or _ChatDeltaFunction()
                slot["id"] = call.id or slot["id"]
                slot["name"] += function.name or ""
                slot["arguments"].append(function.arguments or "")
                deltas.append(
                    ToolCallDelta(
                        index=call.index, id=call.id, name=function.name, arguments=function.arguments or ""
                    )
                )
        return deltas

    def final_body(self) -> Any:
        calls = [
            {
                "id": slot["id"] or "",
                "type": "function",
                "function": {"name": slot["name"], "arguments": "".join(slot["arguments"])},
            }
            for _, slot in sorted(self._calls.items())
        ]
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self._text)}
        if calls:
            message["tool_calls"] = calls
        return {
            "id": self._id,
            "model": self._model,
            "choices": [{"index": 0, "message": message, "finish_reason": self._finish}],
            "usage": self._usage,
        }


def local_provider_transport(
    definition: LocalProviderDefinition,
    *,
    client: httpx.AsyncClient | None = None,
    timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
    privacy_policy: PrivacyPolicy | None = None,
    on_usage: UsageCallback | None = None,
    converter: MessageConverter | None = None,
) -> OpenAIChatTransport:
    """A chat transport for a validated local provider (its ``/v1`` root, its resolved key).

    Local servers read ``max_tokens``, not OpenAI's newer ``max_completion_tokens``. The privacy
    destination is decided by the provider id: list the id in ``PrivacyPolicy.local_providers`` when the
    server runs on this machine, so local-only content may reach it.
    """
    return OpenAIChatTransport(
        base_url=definition.api_root,
        provider=definition.id,
        api_key=definition.resolve_api_key(),
        api_key_env=None,
        client=client,
        timeout_s=timeout_s,
        privacy_policy=privacy_policy,
        on_usage=on_usage,
        output_limit_field="max_tokens",
        converter=converter,
    )


# --- Responses API ------------------------------------------------------------------------------------


class _ResponsesContent(msgspec.Struct):
    type: str
    text: str | None = None


class _ResponsesItem(msgspec.Struct):
    type: str
    content: list[_ResponsesContent] | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None


class _ResponsesUsage(msgspec.Struct):
    input_tokens: int = 0
    output_tokens: int = 0
    input_tokens_details: _CachedTokensDetails | None = None


class _IncompleteDetails(msgspec.Struct):
    reason: str | None = None


class _ResponsesResponse(msgspec.Struct):
    id: str
    output: list[_ResponsesItem]
    status: str | None = None
    model: str | None = None
    usage: _ResponsesUsage | None = None
    incomplete_details: _IncompleteDetails | None = None


class _ResponsesStream:
    """Responses API stream events until ``response.completed``, whose ``response`` is the answer."""

    _FINAL: ClassVar[frozenset[str]] = frozenset({"response.completed", "response.incomplete"})

    def __init__(self) -> None:
        self.done = False
        self._final: Any = None

    def feed(self, event: SseEvent) -> list[StreamEvent]:
        data = msgspec.json.decode(event.data)
        if not isinstance(data, dict):
            raise TypeError("a stream event is not an object")
        kind = data.get("type") or event.event
        if kind == "response.output_text.delta":
            return [TextDelta(text=_text(data.get("delta")))]
        if kind == "response.output_item.added":
            item = data.get("item")
            if isinstance(item, dict) and item.get("type") == "function_call":
                return [ToolCallDelta(index=_index(data), id=item.get("call_id"), name=item.get("name"))]
            return []
        if kind == "response.function_call_arguments.delta":
            return [ToolCallDelta(index=_index(data), arguments=_text(data.get("delta")))]
        if kind in self._FINAL:
            self._final = data.get("response")
            self.done = True
            return []
        if kind in ("response.failed", "error"):
            error = data.get("error") or (data.get("response") or {}).get("error") or {}
            raise stream_error(error.get("code") if isinstance(error, dict) else None)
        return []

    def final_body(self) -> Any:
        return self._final


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError("a text delta is not a string")
    return value


def _index(data: dict[str, Any]) -> int:
    index = data.get("output_index")
    if type(index) is not int:
        raise TypeError("a stream event has no output index")
    return index


def _messages_hash(messages: Sequence[CanonicalMessage]) -> str:
    return stable_hash([msgspec.to_builtins(message) for message in messages])


def _reply_hash(text: str, tool_calls: Sequence[tuple[str, str, dict[str, Any]]]) -> str:
    return stable_hash({"text": text, "toolCalls": [list(call) for call in tool_calls]})


def _reply_hash_of_output(output: CompletionOutput) -> str:
    return _reply_hash(output.text, [(call.id, call.name, call.arguments) for call in output.tool_calls])


def _reply_hash_of_message(message: CanonicalMessage) -> str:
    text = "".join(block.text for block in message.blocks if isinstance(block, TextBlock))
    calls = [
        (block.id, block.name, block.arguments)
        for block in message.blocks
        if isinstance(block, ToolCallBlock)
    ]
    return _reply_hash(text, calls)


class OpenAIResponsesTransport(HttpTransport):
    """``POST {base_url}/responses`` with the ``provider-continuation`` capability.

    After a completed call the result carries a :class:`ProviderContinuation`. Pass it back on the next
    request: when the new plan starts with exactly the messages sent last time, followed by exactly the
    answer the provider stored, only the newer messages are sent with ``previous_response_id``. Any
    difference (trimmed or edited history, another model, system prompt, tool set or privacy policy)
    means a full replay. If the provider no longer has the stored response, the call is replayed once in
    full. With ``store=False`` the provider keeps nothing and every call is a full replay.
    """

    endpoint_path: ClassVar[str] = "/responses"
    interop_format: ClassVar[InteropFormat] = "openai-responses"

    def __init__(
        self,
        *,
        base_url: str = OPENAI_DEFAULT_BASE_URL,
        provider: str = "openai",
        api_key: str | None = None,
        api_key_env: str | None = "OPENAI_API_KEY",
        client: httpx.AsyncClient | None = None,
        timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        privacy_policy: PrivacyPolicy | None = None,
        on_usage: UsageCallback | None = None,
        extra_headers: dict[str, str] | None = None,
        converter: MessageConverter | None = None,
        store: bool = True,
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
        self._converter = converter
        self._store = store
        self._policy_version = privacy_policy_version(privacy_policy)

    def _convert(self, messages: Sequence[CanonicalMessage]) -> list[dict[str, Any]]:
        converter = self._converter or INTEROP_CONVERTERS[self.interop_format]
        return list(converter(messages))

    def _settings_hash(self, request: CompletionRequest) -> str:
        return stable_hash(
            {
                "provider": self.provider,
                "baseUrl": self.base_url,
                "model": request.model,
                "system": request.system,
                "tools": [msgspec.to_builtins(tool) for tool in request.tools],
                "privacy": self._policy_version,
            }
        )

    def continuation_start(self, request: CompletionRequest) -> int | None:
        """Index of the first message to send after ``previous_response_id``, or None for a full replay."""
        state = request.continuation
        if (
            not self._store
            or state is None
            or state.provider != self.provider
            or state.model != request.model
        ):
            return None
        count = state.prefix_count
        messages = request.messages
        if len(messages) <= count + 1 or state.settings_hash != self._settings_hash(request):
            return None
        reply = messages[count]
        if reply.role != "assistant" or _reply_hash_of_message(reply) != state.reply_hash:
            return None
        if _messages_hash(messages[:count]) != state.prefix_hash:
            return None
        return count + 1

    def _payload(self, request: CompletionRequest, start: int | None) -> dict[str, Any]:
        messages = request.messages if start is None else request.messages[start:]
        payload: dict[str, Any] = {
            "model": request.model,
            "input": self._convert(messages),
            "store": self._store,
        }
        if start is not None and request.continuation is not None:
            payload["previous_response_id"] = request.continuation.response_id
        if request.system:
            payload["instructions"] = request.system
        if request.max_output_tokens is not None:
            payload["max_output_tokens"] = request.max_output_tokens
        if request.temperature is not None:
            payload["temperature"] = request.temperature
        if request.tools:
            payload["tools"] = [
                {
                    "type": "function",
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                }
                for tool in request.tools
            ]
        return payload

    def build_payload(self, request: CompletionRequest) -> dict[str, Any]:
        return self._payload(request, self.continuation_start(request))

    def parse_response(self, body: Any) -> tuple[CompletionOutput, CompletionUsage | None]:
        response = answer_as(body, _ResponsesResponse)
        texts: list[str] = []
        calls: list[OutputToolCall] = []
        for item in response.output:
            if item.type == "message":
                texts.extend(part.text or "" for part in item.content or () if part.type == "output_text")
            elif item.type == "function_call":
                if not item.call_id or not item.name:
                    raise ProviderResponseError(
                        "provider-response-invalid", "a function call has no call_id/name"
                    )
                calls.append(_tool_call(item.call_id, item.name, item.arguments))
        usage = None
        if response.usage is not None:
            reported = response.usage
            usage = _usage(reported.input_tokens, reported.output_tokens, reported.input_tokens_details)
        stop = response.status
        if response.incomplete_details is not None and response.incomplete_details.reason:
            stop = response.incomplete_details.reason
        output = CompletionOutput(
            text="".join(texts),
            tool_calls=tuple(calls),
            stop_reason=stop,
            response_id=response.id,
            model=response.model,
        )
        return output, usage

    def stream_assembler(self) -> StreamAssembler:
        return _ResponsesStream()

    async def _complete(
        self, request: CompletionRequest, on_event: StreamCallback | None
    ) -> CompletionResult:
        start = None
        try:
            start = self.continuation_start(request)
        except Exception:  # a malformed continuation only costs the shortcut, never the turn
            start = None
        result = await super()._complete(request, on_event)
        failure = result.failure if isinstance(result, CompletionFallback) else None
        if (
            start is not None
            and failure is not None
            and (
                failure.http_status == 404
                or (failure.http_status == 400 and "previous_response" in failure.reason)
            )
        ):
            # The stored response may have expired or been deleted: replay everything once.
            result = await super()._complete(msgspec.structs.replace(request, continuation=None), on_event)
            start = None
        if (
            not self._store
            or not isinstance(result, CompletionCompleted)
            or not isinstance(result.output, CompletionOutput)
            or not result.output.response_id
        ):
            return result
        continuation = ProviderContinuation(
            provider=self.provider,
            model=request.model,
            response_id=result.output.response_id,
            prefix_count=len(request.messages),
            prefix_hash=_messages_hash(request.messages),
            reply_hash=_reply_hash_of_output(result.output),
            settings_hash=self._settings_hash(request),
        )
        continued_from = (
            request.continuation.response_id if start is not None and request.continuation else None
        )
        return msgspec.structs.replace(result, continuation=continuation, continued_from=continued_from)
