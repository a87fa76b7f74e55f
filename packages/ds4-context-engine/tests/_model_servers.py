"""Scripted model servers on 127.0.0.1 for run-loop tests, in the three providers' streaming shapes.

A ``brain`` reads what the provider was sent (normalised into :class:`Seen`, whatever the wire format) and
returns what the model does next: :class:`Answer` (text and tool calls, streamed as SSE with usage at the
end), :class:`Fail` (an HTTP error status), :class:`Cut` (a stream that stops in the middle) or
:class:`Hang` (no answer for a while). Every request stays recorded on the server.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from _http_servers import Recorded, Reply, ScriptedServer

PATHS = {
    "openai-chat": "/v1/chat/completions",
    "openai-responses": "/v1/responses",
    "anthropic": "/v1/messages",
}


@dataclass
class Answer:
    text: str = ""
    calls: list[tuple[str, str, str]] = field(default_factory=list)  # (id, name, argument JSON text)
    input_tokens: int | None = None  # None: a fair count of the request (its bytes / 4)
    output_tokens: int = 5


@dataclass
class Fail:
    status: int = 500
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Cut:
    text: str = "partial"


@dataclass
class Hang:
    seconds: float = 5.0


@dataclass
class Seen:
    """What the provider received, in one shape for every format."""

    wire: str
    body: dict[str, Any]
    messages: int
    tool_calls: list[str]  # call ids in the order they appear
    tool_results: dict[str, str]  # call id -> result text
    tool_names: list[str]
    user_texts: list[str]
    raw: bytes


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def seen(wire: str, recorded: Recorded) -> Seen:
    body = recorded.json()
    calls: list[str] = []
    results: dict[str, str] = {}
    users: list[str] = []
    if wire == "openai-chat":
        items = body["messages"]
        for message in items:
            if message["role"] == "assistant":
                calls += [call["id"] for call in message.get("tool_calls") or ()]
            elif message["role"] == "tool":
                results[message["tool_call_id"]] = _text_of(message["content"])
            elif message["role"] == "user":
                users.append(_text_of(message["content"]))
        names = [tool["function"]["name"] for tool in body.get("tools") or ()]
    elif wire == "openai-responses":
        items = body["input"]
        for item in items:
            kind = item.get("type", "message")
            if kind == "function_call":
                calls.append(item["call_id"])
            elif kind == "function_call_output":
                results[item["call_id"]] = _text_of(item["output"])
            elif item.get("role") == "user":
                users.append(_text_of(item["content"]))
        names = [tool["name"] for tool in body.get("tools") or ()]
    else:
        items = body["messages"]
        for message in items:
            content = message["content"]
            parts = content if isinstance(content, list) else [{"type": "text", "text": content}]
            for part in parts:
                if part["type"] == "tool_use":
                    calls.append(part["id"])
                elif part["type"] == "tool_result":
                    results[part["tool_use_id"]] = _text_of(part.get("content"))
                elif part["type"] == "text" and message["role"] == "user":
                    users.append(part["text"])
        names = [tool["name"] for tool in body.get("tools") or ()]
    return Seen(wire, body, len(items), calls, results, names, users, recorded.body)


def _sse(events: list[Any], *, named: bool) -> bytes:
    out = []
    for event in events:
        if event == "[DONE]":
            out.append("data: [DONE]\n\n")
            continue
        head = f"event: {event['type']}\n" if named else ""
        out.append(f"{head}data: {json.dumps(event)}\n\n")
    return "".join(out).encode()


def _chat_events(answer: Answer, tokens: int) -> list[Any]:
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "scripted"}
    events: list[Any] = []
    if answer.text:
        half = len(answer.text) // 2
        for piece in (answer.text[:half], answer.text[half:]):
            if piece:
                events.append(
                    {**base, "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
                )
    for index, (call_id, name, arguments) in enumerate(answer.calls):
        cut = len(arguments) // 2
        first = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": arguments[:cut]},
        }
        second = {"index": index, "function": {"arguments": arguments[cut:]}}
        for part in (first, second):
            events.append(
                {**base, "choices": [{"index": 0, "delta": {"tool_calls": [part]}, "finish_reason": None}]}
            )
    finish = "tool_calls" if answer.calls else "stop"
    events.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    usage = {
        "prompt_tokens": tokens,
        "completion_tokens": answer.output_tokens,
        "total_tokens": tokens + answer.output_tokens,
    }
    events.append({**base, "choices": [], "usage": usage})
    events.append("[DONE]")
    return events


def _responses_events(answer: Answer, tokens: int) -> list[Any]:
    events: list[Any] = []
    output: list[Any] = []
    if answer.text:
        events.append(
            {
                "type": "response.output_text.delta",
                "item_id": "msg_1",
                "output_index": 0,
                "content_index": 0,
                "delta": answer.text,
            }
        )
        output.append(
            {
                "type": "message",
                "id": "msg_1",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": answer.text, "annotations": []}],
            }
        )
    for index, (call_id, name, arguments) in enumerate(answer.calls, start=len(output)):
        item = {
            "type": "function_call",
            "id": f"fc_{index}",
            "call_id": call_id,
            "name": name,
            "arguments": "",
            "status": "in_progress",
        }
        events.append({"type": "response.output_item.added", "output_index": index, "item": item})
        events.append(
            {
                "type": "response.function_call_arguments.delta",
                "item_id": f"fc_{index}",
                "output_index": index,
                "delta": arguments,
            }
        )
        output.append({**item, "arguments": arguments, "status": "completed"})
    final = {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "status": "completed",
        "model": "scripted",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": tokens,
            "output_tokens": answer.output_tokens,
            "total_tokens": tokens + answer.output_tokens,
        },
    }
    events.append({"type": "response.completed", "response": final})
    return events


def _anthropic_events(answer: Answer, tokens: int) -> list[Any]:
    events: list[Any] = [
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "scripted",
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": tokens, "output_tokens": 1},
            },
        }
    ]
    index = 0
    if answer.text:
        events += [
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": answer.text}},
            {"type": "content_block_stop", "index": 0},
        ]
        index = 1
    for offset, (call_id, name, arguments) in enumerate(answer.calls):
        block = index + offset
        events += [
            {
                "type": "content_block_start",
                "index": block,
                "content_block": {"type": "tool_use", "id": call_id, "name": name, "input": {}},
            },
            {
                "type": "content_block_delta",
                "index": block,
                "delta": {"type": "input_json_delta", "partial_json": arguments},
            },
            {"type": "content_block_stop", "index": block},
        ]
    stop = "tool_use" if answer.calls else "end_turn"
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": answer.output_tokens},
        }
    )
    events.append({"type": "message_stop"})
    return events


def stream_body(wire: str, answer: Answer, tokens: int) -> bytes:
    if wire == "openai-chat":
        return _sse(_chat_events(answer, tokens), named=False)
    if wire == "openai-responses":
        return _sse(_responses_events(answer, tokens), named=True)
    return _sse(_anthropic_events(answer, tokens), named=True)


Brain = Callable[[Seen, int], Any]


class ModelServer:
    """A scripted model behind a real HTTP server; ``seen`` holds every request, normalised."""

    def __init__(self, wire: str, brain: Brain) -> None:
        self.wire = wire
        self.brain = brain
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        self.server = ScriptedServer()
        self.server.on("POST", PATHS[wire], self._respond)

    def _respond(self, recorded: Recorded) -> Reply:
        view = seen(self.wire, recorded)
        with self._lock:
            self.seen.append(view)
            number = len(self.seen)
        action = self.brain(view, number)
        if isinstance(action, Fail):
            return Reply(
                status=action.status,
                body={"error": {"type": "scripted", "message": "x"}},
                headers=action.headers,
            )
        if isinstance(action, Hang):
            return Reply(status=200, body={}, delay_s=action.seconds)
        if isinstance(action, Cut):
            body = stream_body(self.wire, Answer(text=action.text), 10)
            cut = body[: len(body) // 2]
            return Reply(status=200, headers={"Content-Type": "text/event-stream"}, stream=lambda: [cut])
        tokens = action.input_tokens if action.input_tokens is not None else max(1, len(recorded.body) // 4)
        body = stream_body(self.wire, action, tokens)
        pieces = [body[i : i + 97] for i in range(0, len(body), 97)]
        return Reply(status=200, headers={"Content-Type": "text/event-stream"}, stream=lambda: pieces)

    @property
    def url(self) -> str:
        return self.server.url + "/v1"

    def __enter__(self) -> ModelServer:
        self.server.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.__exit__(*exc)


def transport_for(wire: str, url: str, **kwargs: Any) -> Any:
    from ds4_context_engine.providers import (  # noqa: PLC0415
        AnthropicMessagesTransport,
        OpenAIChatTransport,
        OpenAIResponsesTransport,
    )

    kinds = {
        "openai-chat": OpenAIChatTransport,
        "openai-responses": OpenAIResponsesTransport,
        "anthropic": AnthropicMessagesTransport,
    }
    provider = kwargs.pop("provider", "anthropic" if wire == "anthropic" else "openai")
    return kinds[wire](base_url=url, provider=provider, api_key="test-key", api_key_env=None, **kwargs)
