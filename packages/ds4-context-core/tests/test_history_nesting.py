"""Core decoders on hostile input: deep nesting gets ``history-nesting-too-deep`` (issue 22, item 4), and
the crashes tests/fuzz found each get a code instead of a raw exception."""

from __future__ import annotations

import pytest

from ds4_context_core import CanonicalMessage, HistoryRecordError, Provenance, ToolCallBlock
from ds4_context_core._history import _decode
from ds4_context_core.history import (
    HISTORY_DECODE_CODES,
    HISTORY_MAX_NESTING_DEPTH,
    check_message_nesting,
    decode_canonical_message,
    decode_canonical_messages_jsonl,
    decode_runtime_history_snapshot,
)

_ENVELOPE = (
    b'{"id":"s:1","sourceEntryId":"1","role":"assistant","blocks":[{"type":"toolCall","id":"c","name":"f",'
    b'"arguments":{"a":%s}}],"provenance":{"source":"runtime-session","sessionId":"s","entryId":"1"}}'
)


def _message(depth: int) -> bytes:
    """A message whose deepest array is at record level ``depth`` (the arguments object is level 4)."""
    arrays = depth - 4
    return _ENVELOPE % (b"[" * arrays + b"]" * arrays)


def _snapshot(message: bytes) -> bytes:
    return (
        b'{"schemaVersion":"runtime-history-v1","runtimeId":"r","sessionId":"s","revision":"v",'
        b'"projectRoot":"/p","messages":[%s],"toolAtomicGroups":[]}' % message
    )


def test_the_code_is_documented():
    assert "history-nesting-too-deep" in HISTORY_DECODE_CODES


def test_a_message_at_the_limit_decodes_everywhere():
    raw = _message(HISTORY_MAX_NESTING_DEPTH)
    assert decode_canonical_message(raw).id == "s:1"
    assert len(decode_canonical_messages_jsonl(raw + b"\n")) == 1


@pytest.mark.parametrize("depth", [HISTORY_MAX_NESTING_DEPTH + 1, 5_000, 200_000])
def test_one_message_deeper_than_the_limit_is_refused(depth):
    with pytest.raises(HistoryRecordError) as caught:
        decode_canonical_message(_message(depth))
    assert caught.value.code == "history-nesting-too-deep"


@pytest.mark.parametrize("depth", [HISTORY_MAX_NESTING_DEPTH + 1, 5_000, 200_000])
def test_jsonl_names_the_line_of_the_deep_record(depth):
    data = _message(10) + b"\n\n" + _message(depth) + b"\n"
    with pytest.raises(HistoryRecordError) as caught:
        decode_canonical_messages_jsonl(data)
    assert (caught.value.code, caught.value.line) == ("history-nesting-too-deep", 3)


@pytest.mark.parametrize("depth", [HISTORY_MAX_NESTING_DEPTH + 1, 5_000])
def test_a_snapshot_with_a_deep_message_is_refused(depth):
    with pytest.raises(HistoryRecordError) as caught:
        decode_runtime_history_snapshot(_snapshot(_message(depth)))
    assert caught.value.code == "history-nesting-too-deep"


@pytest.mark.parametrize("decode", [decode_canonical_message, decode_runtime_history_snapshot])
def test_bare_deep_json_is_refused_with_a_code(decode):
    with pytest.raises(HistoryRecordError) as caught:
        decode(b"[" * 100_000 + b"]" * 100_000)
    assert caught.value.code in HISTORY_DECODE_CODES


def test_unknown_blocks_kept_as_opaque_still_obey_the_limit():
    block = b'{"type":"future","v":' + b"[" * 5_000 + b"]" * 5_000 + b"}"
    raw = (
        b'{"id":"s:1","sourceEntryId":"1","role":"user","blocks":[' + block + b"],"
        b'"provenance":{"source":"runtime-session","sessionId":"s","entryId":"1"}}'
    )
    with pytest.raises(HistoryRecordError) as caught:
        decode_canonical_message(raw, unknown_blocks="opaque")
    assert caught.value.code == "history-nesting-too-deep"


_FUTURE_MESSAGE = (
    b'{"id":"s:1","sourceEntryId":"1","role":"user","blocks":[{"type":"future"}],'
    b'"provenance":{"source":"runtime-session","sessionId":"s","entryId":"1"}}'
)


@pytest.mark.parametrize(
    ("decode", "data"),
    [
        (decode_canonical_message, _FUTURE_MESSAGE + b'\n{"id":'),
        (decode_runtime_history_snapshot, _snapshot(_FUTURE_MESSAGE) + b'\n{"id":'),
    ],
    ids=["message", "snapshot"],
)
def test_an_unknown_block_before_broken_json_is_malformed_not_a_raw_decode_error(decode, data):
    # Found by tests/fuzz: the typed pass stops at the unknown block, the opaque pass meets the garbage.
    with pytest.raises(HistoryRecordError) as caught:
        decode(data, unknown_blocks="opaque")
    assert caught.value.code == "history-json-malformed"


@pytest.mark.parametrize(
    "block",
    [
        b'{"type":"image","data":"AAAA"}',
        b'{"type":"image","mimeType":null,"data":"AAAA"}',
        b'{"type":"opaqueProvider","value":1}',
        b'{"type":"opaqueProvider","value":1,"originalType":null}',
    ],
    ids=["image-no-mime", "image-null-mime", "opaque-no-type", "opaque-null-type"],
)
def test_optional_identifiers_left_unset_decode_in_every_decoder(block):
    # Found by tests/fuzz: an unset mimeType or originalType raised TypeError in the identifier check.
    raw = (
        b'{"id":"s:1","sourceEntryId":"1","role":"user","blocks":[' + block + b"],"
        b'"provenance":{"source":"runtime-session","sessionId":"s","entryId":"1"}}'
    )
    message = decode_canonical_message(raw)
    assert decode_canonical_messages_jsonl(raw + b"\n") == (message,)
    assert decode_runtime_history_snapshot(_snapshot(raw)).messages == (message,)


def _walks(monkeypatch) -> list[object]:
    """The values the nesting check walks one by one (the slow path)."""
    walked: list[object] = []
    real = _decode.nesting_exceeds

    def counting(value, limit, level=1):
        walked.append(value)
        return real(value, limit, level)

    monkeypatch.setattr(_decode, "nesting_exceeds", counting)
    return walked


def test_values_too_small_to_be_deep_are_not_walked(monkeypatch):
    walked = _walks(monkeypatch)
    shallow = _message(10) + b"\n"
    many_brackets = _ENVELOPE % b'{"text":"%s","list":[1,2]}' % (b"[{" * 200) + b"\n"
    messages = decode_canonical_messages_jsonl(shallow * 1_000 + many_brackets)
    assert len(messages) == 1_001
    # only the value whose JSON holds more brackets than a value at its level may nest is walked
    assert walked == [messages[-1].blocks[0].arguments]


def test_brackets_in_strings_neither_hide_nor_fake_depth():
    in_strings = _ENVELOPE % (b'"' + b"[" * 1_000 + b'"')
    deep = _message(HISTORY_MAX_NESTING_DEPTH + 1)
    assert len(decode_canonical_messages_jsonl(in_strings + b"\n")) == 1
    with pytest.raises(HistoryRecordError) as caught:
        decode_canonical_messages_jsonl(in_strings + b"\n" + _message(8) + b"\n" + deep + b"\n")
    assert (caught.value.code, caught.value.line) == ("history-nesting-too-deep", 3)


def test_values_that_are_not_json_are_still_checked():
    cyclic: list[object] = []
    cyclic.append(cyclic)  # a writer's own objects may be anything: a cycle is infinitely deep
    provenance = Provenance(source="runtime-session", session_id="s", entry_id="1")

    def message(arguments):
        call = ToolCallBlock(id="c", name="f", arguments=arguments)
        return CanonicalMessage(
            id="s:1", source_entry_id="1", role="assistant", blocks=(call,), provenance=provenance
        )

    check_message_nesting([message({"a": {1, 2}})])  # a set is no JSON, and shallow
    with pytest.raises(HistoryRecordError) as caught:
        check_message_nesting([message({"a": [1]}), message({"a": cyclic})], first_line=5)
    assert (caught.value.code, caught.value.line) == ("history-nesting-too-deep", 6)
