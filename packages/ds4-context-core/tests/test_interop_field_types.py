"""Issue 22: a text field holding a number, list, object or boolean is an ``InteropFormatError`` with a
code and the path of the field, from every converter, never a ``TypeError`` or ``AttributeError``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ds4_context_core import InteropFormatError
from ds4_context_core.interop import from_anthropic_messages, from_openai_chat, from_openai_responses

OTHER_TYPES = (7, 1.5, True, ["a", 1], {"text": "a"})


def _chat(payload: Any) -> object:
    return from_openai_chat(payload, session_id="s")


def _responses(payload: Any) -> object:
    return from_openai_responses(payload, session_id="s")


def _anthropic(payload: Any) -> object:
    return from_anthropic_messages(payload, session_id="s")


# (converter, payload with the text field set to the value, code, path of the field)
CASES: tuple[tuple[Callable[[Any], object], Callable[[Any], Any], str, str], ...] = (
    (_chat, lambda value: [{"role": "user", "content": value}], "interop-content-invalid", "$[0].content"),
    (
        _chat,
        lambda value: [{"role": "user", "content": [{"type": "text", "text": value}]}],
        "interop-content-invalid",
        "$[0].content[0].text",
    ),
    (
        _chat,
        lambda value: [{"role": "assistant", "content": [{"type": "text", "text": value}]}],
        "interop-content-invalid",
        "$[0].content[0].text",
    ),
    (
        _responses,
        lambda value: [{"role": "user", "content": [{"type": "input_text", "text": value}]}],
        "interop-content-invalid",
        "$[0].content[0].text",
    ),
    (
        _responses,
        lambda value: [
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": value}]}
        ],
        "interop-content-invalid",
        "$[0].content[0].text",
    ),
    (
        _anthropic,
        lambda value: [{"role": "user", "content": [{"type": "text", "text": value}]}],
        "interop-content-invalid",
        "$[0].content[0].text",
    ),
    (
        _anthropic,
        lambda value: [{"role": "assistant", "content": [{"type": "thinking", "thinking": value}]}],
        "interop-content-invalid",
        "$[0].content[0].thinking",
    ),
)


@pytest.mark.parametrize("value", OTHER_TYPES, ids=lambda value: type(value).__name__)
@pytest.mark.parametrize(("convert", "payload", "code", "path"), CASES)
def test_a_text_field_of_another_type_is_a_coded_error_with_its_path(convert, payload, code, path, value):
    # lists and objects would be unhashable, numbers have no string methods: neither may escape
    with pytest.raises(InteropFormatError) as caught:
        convert(payload(value))
    assert caught.value.code == code
    assert caught.value.path is not None
    assert caught.value.path.startswith(path)  # a list content is located down to its bad part
    assert repr(value) not in str(caught.value)  # the message names the field, never its value
