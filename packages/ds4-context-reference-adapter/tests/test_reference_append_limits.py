"""An append is accepted only when the reader will read it back (issue 22, item 1).

Each limit of the canonical model is tried at the boundary: the limit itself is written and reads back
equal; one more is refused with a code, the file keeps its bytes, and the history stays usable.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from reference_helpers import digest, make_message

from ds4_context_core import (
    ArtifactReferenceBlock,
    CanonicalBlock,
    CanonicalMessage,
    FileReferenceBlock,
    ImageBlock,
    OpaqueProviderBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from ds4_context_core.history import (
    HISTORY_MAX_IDENTIFIER_CHARS,
    HISTORY_MAX_NESTING_DEPTH,
    HISTORY_MAX_PATH_CHARS,
    HISTORY_MAX_TEXT_CHARS,
)
from ds4_context_reference_adapter import (
    ReferenceHistoryError,
    append_reference_history_message,
    read_reference_history,
)

# The message object, its blocks array and the block object come before a tool call's arguments.
_ARGUMENTS_LEVEL = 4


def _nested(levels: int) -> Any:
    value: Any = []
    for _ in range(levels - 1):
        value = [value]
    return value


def _text(size: int) -> tuple[CanonicalBlock, ...]:
    return (TextBlock(text="t" * size),)


def _tool_name(size: int) -> tuple[CanonicalBlock, ...]:
    return (ToolCallBlock(id="call-1", name="n" * size, arguments={}),)


def _result_tool_name(size: int) -> tuple[CanonicalBlock, ...]:
    return (
        ToolCallBlock(id="call-1", name="read", arguments={}),
        ToolResultBlock(tool_call_id="call-1", tool_name="n" * size, content="ok"),
    )


def _mime_type(size: int) -> tuple[CanonicalBlock, ...]:
    return (ImageBlock(mime_type="m" * size, data="AAAA"),)


def _artifact_id(size: int) -> tuple[CanonicalBlock, ...]:
    return (ArtifactReferenceBlock(artifact_id="a" * size),)


def _opaque_type(size: int) -> tuple[CanonicalBlock, ...]:
    return (OpaqueProviderBlock(value={"k": 1}, original_type="o" * size),)


def _path(size: int) -> tuple[CanonicalBlock, ...]:
    return (FileReferenceBlock(path="/" + "p" * (size - 1)),)


def _nesting(depth: int) -> tuple[CanonicalBlock, ...]:
    # ``depth`` counts the record's levels: the arguments object is level 4, the list below it level 5.
    return (ToolCallBlock(id="call-1", name="read", arguments={"a": _nested(depth - _ARGUMENTS_LEVEL)}),)


LIMITS: list[tuple[str, Callable[[int], tuple[CanonicalBlock, ...]], int, str]] = [
    ("text", _text, HISTORY_MAX_TEXT_CHARS, "field-too-long"),
    ("tool-call-name", _tool_name, HISTORY_MAX_IDENTIFIER_CHARS, "field-too-long"),
    ("tool-result-name", _result_tool_name, HISTORY_MAX_IDENTIFIER_CHARS, "field-too-long"),
    ("mime-type", _mime_type, HISTORY_MAX_IDENTIFIER_CHARS, "field-too-long"),
    ("artifact-id", _artifact_id, HISTORY_MAX_IDENTIFIER_CHARS, "field-too-long"),
    ("opaque-type", _opaque_type, HISTORY_MAX_IDENTIFIER_CHARS, "field-too-long"),
    ("path", _path, HISTORY_MAX_PATH_CHARS, "field-too-long"),
    ("nesting", _nesting, HISTORY_MAX_NESTING_DEPTH, "nesting-too-deep"),
]


def _message(entry: str, blocks: tuple[CanonicalBlock, ...]) -> CanonicalMessage:
    return make_message(entry, *blocks, role="assistant")


def _assert_still_usable(history: Path, expected: int) -> None:
    """The history reads, and a later ordinary append lands and reads back."""
    assert len(read_reference_history(history).messages) == expected
    append_reference_history_message(history, make_message("after"))
    assert read_reference_history(history).messages[-1].source_entry_id == "after"


@pytest.mark.parametrize(("name", "build", "limit", "reason"), LIMITS, ids=[row[0] for row in LIMITS])
def test_a_value_at_the_limit_is_written_and_reads_back(history, name, build, limit, reason):
    message = _message("at-limit", build(limit))
    append_reference_history_message(history, message)
    assert read_reference_history(history).messages == (message,)
    _assert_still_usable(history, 1)


@pytest.mark.parametrize(("name", "build", "limit", "reason"), LIMITS, ids=[row[0] for row in LIMITS])
def test_one_over_the_limit_is_refused_and_the_file_is_unchanged(history, name, build, limit, reason):
    before = digest(history)
    with pytest.raises(ReferenceHistoryError) as caught:
        append_reference_history_message(history, _message("over", build(limit + 1)))
    assert (caught.value.code, caught.value.reason) == ("reference-history-message-rejected", reason)
    assert digest(history) == before
    _assert_still_usable(history, 0)


@pytest.mark.parametrize(
    ("blocks", "why"),
    [
        ((TextBlock(text="\ud800"),), "a lone surrogate has no UTF-8 form"),
        ((TextBlock(text=7),), "a text that is not a string"),  # type: ignore[arg-type]
        ((ToolCallBlock(id="c", name="read", arguments=[1]),), "arguments that are not an object"),  # type: ignore[arg-type]
    ],
)
def test_a_message_the_reader_would_refuse_is_never_written(history, blocks, why):
    before = digest(history)
    with pytest.raises(ReferenceHistoryError) as caught:
        append_reference_history_message(history, _message("bad", blocks))
    assert (caught.value.code, caught.value.reason) == (
        "reference-history-message-rejected",
        "record-invalid",
    )
    assert digest(history) == before, why
    _assert_still_usable(history, 0)


def test_a_role_outside_the_model_is_refused_before_writing(history):
    before = digest(history)
    message = make_message("bad-role", role="narrator")
    with pytest.raises(ReferenceHistoryError) as caught:
        append_reference_history_message(history, message)
    assert caught.value.reason == "record-invalid"
    assert digest(history) == before


def test_the_reader_refuses_a_hand_written_record_over_the_nesting_limit(history):
    # Written by hand (bypassing the appender): the reader names the line and the reason.
    good = _message("ok", _nesting(HISTORY_MAX_NESTING_DEPTH))
    deep = _message("deep", _nesting(HISTORY_MAX_NESTING_DEPTH + 1))
    with history.open("ab") as handle:
        for message in (good, deep):
            handle.write(msgspec.json.encode({"type": "message", "message": message}) + b"\n")
    with pytest.raises(ReferenceHistoryError) as caught:
        read_reference_history(history)
    assert (caught.value.code, caught.value.reason, caught.value.line) == (
        "canonical-history-read-failed",
        "nesting-too-deep",
        3,
    )
