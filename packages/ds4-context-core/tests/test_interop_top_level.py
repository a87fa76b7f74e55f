"""A top-level payload that is not a list is a coded error, not a TypeError (found by tests/fuzz)."""

from __future__ import annotations

from typing import Any

import pytest

from ds4_context_core import InteropFormatError
from ds4_context_core.interop import (
    from_anthropic_messages,
    from_openai_chat,
    from_openai_responses,
    to_anthropic_messages,
)


@pytest.mark.parametrize("convert", [from_openai_chat, from_openai_responses])
@pytest.mark.parametrize("payload", [None, 7, 1.5, True, "user", b"[]", {"role": "user", "content": "hi"}])
def test_a_payload_that_is_not_a_list_is_refused_with_a_code(convert: Any, payload: Any) -> None:
    with pytest.raises(InteropFormatError) as caught:
        convert(payload, session_id="s")
    assert (caught.value.code, caught.value.path) == ("interop-message-invalid", "$")


@pytest.mark.parametrize("convert", [from_openai_chat, from_openai_responses])
def test_a_tuple_or_a_generator_of_messages_is_still_accepted(convert: Any) -> None:
    items = ({"role": "user", "content": "hi"},)
    assert convert(items, session_id="s") == convert(iter(items), session_id="s")


@pytest.mark.parametrize(
    "payload",
    [
        {"system": [{}]},
        {"messages": [{"role": "user", "content": [{"no-type": 1}]}]},
        {"system": [{"type": "text", "text": "a"}, {"kind": "x"}], "messages": []},
    ],
    ids=["system-part", "message-part", "mixed-system"],
)
def test_an_anthropic_part_without_a_type_round_trips(payload: Any) -> None:
    # Found by tests/fuzz: export read part["type"] of opaque parts kept from the input (KeyError).
    messages = from_anthropic_messages(payload, session_id="s")
    again = to_anthropic_messages(messages)
    assert from_anthropic_messages(again, session_id="s") == messages
