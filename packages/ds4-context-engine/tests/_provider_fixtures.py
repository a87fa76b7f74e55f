"""Canonical conversations, realistic provider answers and validators built on the official SDK types."""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import pydantic

from ds4_context_core import (
    CanonicalMessage,
    ModelDescriptor,
    Provenance,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)


def message(index: int, role: str, *blocks: Any) -> CanonicalMessage:
    return CanonicalMessage(
        id=f"m{index}",
        source_entry_id=f"e{index}",
        role=role,  # type: ignore[arg-type]
        blocks=tuple(blocks),
        provenance=Provenance(source="pi-session", session_id="s1", entry_id=f"e{index}"),
    )


def conversation() -> tuple[CanonicalMessage, ...]:
    return (
        message(1, "user", TextBlock(text="Summarize README.md")),
        message(2, "assistant", ToolCallBlock(id="call_1", name="read", arguments={"path": "README.md"})),
        message(
            3,
            "tool",
            ToolResultBlock(tool_call_id="call_1", tool_name="read", content="# ds4\nContext tools."),
        ),
        message(4, "assistant", TextBlock(text="It describes context tools.")),
        message(5, "user", TextBlock(text="Now list the commands.")),
    )


def model(
    provider: str = "openai", model_id: str = "gpt-4o-mini", max_tokens: int | None = 1024
) -> ModelDescriptor:
    return ModelDescriptor(provider=provider, id=model_id, context_window=128000, max_tokens=max_tokens)


def materialize(value: Any) -> Any:
    """Consume pydantic's lazy iterators (that is when they validate) and return plain data."""
    if isinstance(value, Mapping):
        return {key: materialize(item) for key, item in value.items()}
    if isinstance(value, str | bytes | int | float | bool) or value is None:
        return value
    if hasattr(value, "__iter__"):
        return [materialize(item) for item in value]
    return value


@functools.cache
def _adapter(request_type: Any) -> pydantic.TypeAdapter[Any]:
    return pydantic.TypeAdapter(request_type)


def assert_accepted_by(request_type: Any, payload: dict[str, Any]) -> None:
    """The SDK's request type accepts ``payload`` and keeps every key of it (no unknown fields)."""
    adapter = _adapter(request_type)  # kept alive: the lazy iterators validate through it
    validated = materialize(adapter.validate_python(payload))
    assert validated == json.loads(json.dumps(payload))


OPENAI_CHAT_ANSWER = {
    "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
    "object": "chat.completion",
    "created": 1741569952,
    "model": "gpt-4o-mini-2024-07-18",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "The commands are demo, plan and status.",
                "refusal": None,
                "annotations": [],
            },
            "logprobs": None,
            "finish_reason": "stop",
        }
    ],
    "usage": {
        "prompt_tokens": 96,
        "completion_tokens": 11,
        "total_tokens": 107,
        "prompt_tokens_details": {"cached_tokens": 64, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
    },
    "service_tier": "default",
    "system_fingerprint": "fp_06737a9306",
}

OPENAI_CHAT_TOOL_ANSWER = {
    "id": "chatcmpl-abc123",
    "object": "chat.completion",
    "created": 1741569953,
    "model": "gpt-4o-mini-2024-07-18",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_9ZtbtxK6Qy",
                        "type": "function",
                        "function": {"name": "read", "arguments": '{"path": "docs/cli.md"}'},
                    }
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {"prompt_tokens": 120, "completion_tokens": 18, "total_tokens": 138},
}

OPENAI_RATE_LIMIT_BODY = {
    "error": {
        "message": "Rate limit reached for gpt-4o-mini in organization org-x on tokens per min (TPM).",
        "type": "tokens",
        "param": None,
        "code": "rate_limit_exceeded",
    }
}

ANTHROPIC_ANSWER = {
    "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5-20250929",
    "content": [
        {"type": "text", "text": "I'll read the docs."},
        {
            "type": "tool_use",
            "id": "toolu_01A09q90qw90lq917835lq9",
            "name": "read",
            "input": {"path": "docs/cli.md"},
        },
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 12,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 2048,
        "output_tokens": 40,
    },
}

ANTHROPIC_OVERLOADED_BODY = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


def responses_answer(response_id: str, text: str) -> dict[str, Any]:
    return {
        "id": response_id,
        "object": "response",
        "created_at": 1741476542,
        "status": "completed",
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "max_output_tokens": None,
        "model": "gpt-4.1-2025-04-14",
        "output": [
            {
                "type": "message",
                "id": "msg_67ccd2bf17f0819081ff3bb2cf6508e6",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ],
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "store": True,
        "temperature": 1.0,
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": {
            "input_tokens": 36,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": 87,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 123,
        },
        "metadata": {},
    }


def run_closing(
    transport: Any, call: Callable[..., Awaitable[Any]], *args: Any, backend: str = "asyncio"
) -> Any:
    """``await call(*args)`` in a new event loop, then close the transport's HTTP client in that loop."""

    async def main() -> Any:
        async with transport:
            return await call(*args)

    return anyio.run(main, backend=backend)
