"""Provider payloads nested too deep get ``interop-nesting-too-deep``, never a RecursionError (issue 22)."""

from __future__ import annotations

from typing import Any

import pytest

from ds4_context_core import InteropFormatError
from ds4_context_core.history import (
    HISTORY_MAX_NESTING_DEPTH,
    decode_canonical_messages_jsonl,
    encode_canonical_messages_jsonl,
)
from ds4_context_core.interop import (
    INTEROP_ERROR_CODES,
    from_anthropic_messages,
    from_openai_chat,
    from_openai_responses,
)


def _nested(levels: int) -> Any:
    value: dict[str, Any] = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


def _deep_text(levels: int) -> str:
    return '{"a":' * levels + "1" + "}" * levels


DEEP = 20_000  # far past any recursion limit
SHALLOW = 8


def _chat_arguments(arguments: str) -> list[dict[str, Any]]:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    return [{"role": "assistant", "content": None, "tool_calls": [call]}]


CASES: list[tuple[str, Any, Any]] = [
    ("chat-arguments", from_openai_chat, lambda n: _chat_arguments(_deep_text(n))),
    ("chat-extra-key", from_openai_chat, lambda n: [{"role": "user", "content": "hi", "x": _nested(n)}]),
    (
        "chat-unknown-part",
        from_openai_chat,
        lambda n: [{"role": "user", "content": [{"type": "future", "v": _nested(n)}]}],
    ),
    (
        "responses-arguments",
        from_openai_responses,
        lambda n: [{"type": "function_call", "call_id": "c", "name": "f", "arguments": _deep_text(n)}],
    ),
    ("responses-unknown-item", from_openai_responses, lambda n: [{"type": "future", "v": _nested(n)}]),
    (
        "anthropic-input",
        from_anthropic_messages,
        lambda n: [
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "c", "name": "f", "input": _nested(n)}],
            }
        ],
    ),
]


def test_the_code_is_documented():
    assert "interop-nesting-too-deep" in INTEROP_ERROR_CODES


@pytest.mark.parametrize(("name", "convert", "payload"), CASES, ids=[case[0] for case in CASES])
def test_a_deep_payload_is_refused_with_a_code(name, convert, payload):
    with pytest.raises(InteropFormatError) as caught:
        convert(payload(DEEP), session_id="s")
    assert caught.value.code == "interop-nesting-too-deep"


@pytest.mark.parametrize(("name", "convert", "payload"), CASES, ids=[case[0] for case in CASES])
def test_just_over_the_history_limit_is_refused_too(name, convert, payload):
    # Deep enough to be refused by the history decoders, shallow enough for Python's own json module.
    with pytest.raises(InteropFormatError) as caught:
        convert(payload(HISTORY_MAX_NESTING_DEPTH), session_id="s")
    assert caught.value.code == "interop-nesting-too-deep"


@pytest.mark.parametrize(("name", "convert", "payload"), CASES, ids=[case[0] for case in CASES])
def test_an_ordinary_payload_converts_and_reads_back(name, convert, payload):
    messages = convert(payload(SHALLOW), session_id="s")
    assert decode_canonical_messages_jsonl(encode_canonical_messages_jsonl(messages)) == messages


def test_a_cyclic_payload_is_refused_not_looped_on():
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    with pytest.raises(InteropFormatError) as caught:
        from_openai_chat([{"role": "user", "content": "hi", "x": cyclic}], session_id="s")
    assert caught.value.code == "interop-nesting-too-deep"
