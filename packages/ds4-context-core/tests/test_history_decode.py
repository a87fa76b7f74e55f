"""Decoding canonical history from JSON/JSONL: byte-stable round trips and a stable code per bad input."""

from __future__ import annotations

import json

import pytest

from ds4_context_core import (
    CanonicalMessage,
    HistoryDecodeError,
    OpaqueProviderBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from ds4_context_core._exceptions import HistoryRecordError
from ds4_context_core.history import (
    HISTORY_DECODE_CODES,
    build_runtime_history_snapshot,
    decode_canonical_message,
    decode_canonical_messages_jsonl,
    decode_runtime_history_snapshot,
    encode_canonical_message,
    encode_canonical_messages_jsonl,
    encode_runtime_history_snapshot,
    validate_runtime_history_snapshot,
)

# Written the way the original TypeScript tools write it: key order of the object literal, optional
# fields present, JSON.stringify spacing (none).
TS_MESSAGE = (
    b'{"id":"s1:e2","sourceEntryId":"e2","role":"assistant","blocks":[{"type":"thinking","thinking":"hm"},'
    b'{"type":"toolCall","id":"call-1","name":"read","arguments":{"path":"src/index.ts","limit":20}}],'
    b'"createdAt":"2025-01-02T03:04:05.000Z","provider":"openai","model":"gpt-4o",'
    b'"provenance":{"source":"runtime-session","sessionId":"s1","entryId":"e2","runtimeId":"rt"},'
    b'"tokenEstimate":57,"flags":{"atomic":true}}'
)


def wire(entry: str, *blocks: dict, role: str = "user", **extra) -> dict:
    return {
        "id": f"s1:{entry}",
        "sourceEntryId": entry,
        "role": role,
        "blocks": list(blocks),
        "provenance": {"source": "runtime-session", "sessionId": "s1", "entryId": entry, "runtimeId": "rt"},
        "flags": {},
        **extra,
    }


def jsonl(*records: dict) -> bytes:
    return b"".join(json.dumps(record, separators=(",", ":")).encode() + b"\n" for record in records)


def text(value: str) -> dict:
    return {"type": "text", "text": value}


def fails(code: str, call, *args, **kwargs) -> HistoryRecordError:
    assert code in HISTORY_DECODE_CODES
    with pytest.raises(HistoryRecordError) as caught:
        call(*args, **kwargs)
    assert caught.value.code == code
    assert isinstance(caught.value, HistoryDecodeError)
    assert isinstance(caught.value, ValueError)
    return caught.value


def test_typescript_written_message_decodes_and_re_encodes_byte_stably():
    message = decode_canonical_message(TS_MESSAGE)
    assert message.provider == "openai"
    assert message.created_at == "2025-01-02T03:04:05.000Z"
    assert message.blocks[1] == ToolCallBlock(
        id="call-1", name="read", arguments={"path": "src/index.ts", "limit": 20}
    )
    assert message.provenance.runtime_id == "rt"
    encoded = encode_canonical_message(message)
    # Field order is the model's, which is the original's; so the bytes are the original bytes.
    assert encoded == TS_MESSAGE
    assert encode_canonical_message(decode_canonical_message(encoded)) == encoded


def test_unset_optional_fields_are_omitted_and_str_input_is_accepted():
    message = decode_canonical_message(json.dumps(wire("e1", text("hi"))))
    assert message.provider is None
    assert encode_canonical_message(message) == (
        b'{"id":"s1:e1","sourceEntryId":"e1","role":"user","blocks":[{"type":"text","text":"hi"}],'
        b'"provenance":{"source":"runtime-session","sessionId":"s1","entryId":"e1","runtimeId":"rt"},"flags":{}}'
    )


def test_jsonl_round_trip_keeps_order_and_skips_blank_lines():
    data = (
        jsonl(wire("e1", text("a")), wire("e2", text("b"), role="assistant"))
        + b"\n"
        + jsonl(wire("e3", text("c")))
    )
    messages = decode_canonical_messages_jsonl(data)
    assert [m.id for m in messages] == ["s1:e1", "s1:e2", "s1:e3"]
    encoded = encode_canonical_messages_jsonl(messages)
    assert encoded.endswith(b"\n")
    assert encoded.count(b"\n") == 3
    assert decode_canonical_messages_jsonl(encoded) == messages
    assert decode_canonical_messages_jsonl(b"") == ()


def test_malformed_json_names_the_line_and_echoes_nothing():
    data = jsonl(wire("e1", text("a"))) + b'{"id": "sk-secret-value", oops\n' + jsonl(wire("e3", text("c")))
    error = fails("history-json-malformed", decode_canonical_messages_jsonl, data)
    assert error.line == 2
    assert "sk-secret" not in str(error)
    fails("history-json-malformed", decode_canonical_message, b"{not json")
    fails("history-json-malformed", decode_canonical_message, b"")


def test_unterminated_last_record_is_rejected_as_a_torn_write():
    data = jsonl(wire("e1", text("a"))) + json.dumps(wire("e2", text("b"))).encode()
    error = fails("history-record-unterminated", decode_canonical_messages_jsonl, data)
    assert error.line == 2


@pytest.mark.parametrize(
    ("record", "path"),
    [
        ({**wire("e1", text("a")), "role": "robot"}, "$.role"),
        (wire("e1", {"type": "text", "text": 5}), "$.blocks[0].text"),
        (
            wire("e1", {"type": "toolResult", "toolCallId": "c", "toolName": "x", "content": ["a"]}),
            "$.blocks[0].content",
        ),
        ({k: v for k, v in wire("e1", text("a")).items() if k != "provenance"}, "$"),
        (wire("e1", {"text": "no type"}), "$.blocks[0]"),
        (
            {
                **wire("e1", text("a")),
                "provenance": {"source": "somewhere", "sessionId": "s1", "entryId": "e1"},
            },
            "$.provenance.source",
        ),
    ],
)
def test_wrong_types_and_missing_fields_name_the_path(record, path):
    data = jsonl(wire("e0", text("ok")), record)
    error = fails("history-field-invalid", decode_canonical_messages_jsonl, data)
    assert error.line == 2
    assert error.path == path


def test_bad_enum_value_is_echoed_only_as_a_short_escaped_prefix():
    hostile = "assistant\n" + "x" * 400 + "sk-ant-secret"
    error = fails(
        "history-field-invalid", decode_canonical_message, json.dumps({**wire("e1"), "role": hostile})
    )
    assert "sk-ant-secret" not in str(error)
    assert "\n" not in str(error)
    assert "'assistant" in str(error)
    assert len(str(error)) < 200


def test_unknown_block_type_is_rejected_by_default_and_kept_as_opaque_on_request():
    odd = {"type": "audio", "data": "UklGR...", "format": "wav"}
    record = wire("e1", text("listen"), odd)
    error = fails("history-block-type-unknown", decode_canonical_messages_jsonl, jsonl(record))
    assert error.path == "$.blocks[1].type"
    assert "'audio'" in str(error)
    (message,) = decode_canonical_messages_jsonl(jsonl(record), unknown_blocks="opaque")
    assert message.blocks == (TextBlock(text="listen"), OpaqueProviderBlock(original_type="audio", value=odd))
    single = decode_canonical_message(json.dumps(record), unknown_blocks="opaque")
    assert single == message
    # Nothing is lost: the opaque block carries the whole original block and re-encodes losslessly.
    again = decode_canonical_message(encode_canonical_message(message))
    assert again == message


def test_unknown_block_policy_must_be_known():
    with pytest.raises(ValueError, match="unknown_blocks"):
        decode_canonical_message(json.dumps(wire("e1")), unknown_blocks="drop")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("record", "path"),
    [
        ({**wire("e1", text("a")), "id": "s1:e1\n"}, "$.id"),
        (
            wire(
                "e1",
                {"type": "toolCall", "id": "call\x00", "name": "read", "arguments": {}},
                role="assistant",
            ),
            "$.blocks[].id",
        ),
        (
            wire("e1", {"type": "toolResult", "toolCallId": "c\x1b[2J", "toolName": "x", "content": "ok"}),
            "$.blocks[].toolCallId",
        ),
        (
            {
                **wire("e1", text("a")),
                "provenance": {"source": "pi-session", "sessionId": "s\u00851", "entryId": "e1"},
            },
            "$.provenance.sessionId",
        ),
        ({**wire("e1", text("a")), "model": "gpt\x7f"}, "$.model"),
    ],
)
def test_identifiers_with_control_characters_are_rejected_with_line_and_path(record, path):
    data = jsonl(wire("e0", text("fine")), record)
    error = fails("history-identifier-invalid", decode_canonical_messages_jsonl, data)
    assert error.line == 2
    assert error.path == path
    # Control characters inside text are content, not identifiers: they are fine.
    assert decode_canonical_messages_jsonl(jsonl(wire("e0", text("line\nbreak\x07")))) != ()


def test_line_numbers_stay_exact_with_blank_lines_before_the_bad_record():
    data = b"\n" + jsonl(wire("e0", text("fine"))) + b"\n\n" + jsonl({**wire("e1"), "id": "bad\x01"})
    assert fails("history-identifier-invalid", decode_canonical_messages_jsonl, data).line == 5


def test_oversized_identifier_input_and_message_count():
    long_id = "x" * 513
    error = fails(
        "history-string-too-long", decode_canonical_message, json.dumps({**wire("e1"), "id": long_id})
    )
    assert error.path == "$.id"
    assert long_id not in str(error)
    assert decode_canonical_message(json.dumps({**wire("e1"), "id": "x" * 512})).id == "x" * 512
    data = jsonl(*(wire(f"e{i}", text("a")) for i in range(5)))
    fails("history-input-too-large", decode_canonical_messages_jsonl, data, max_bytes=len(data) - 1)
    assert len(decode_canonical_messages_jsonl(data, max_bytes=len(data))) == 5
    fails("history-too-many-messages", decode_canonical_messages_jsonl, data, max_messages=4)
    assert len(decode_canonical_messages_jsonl(data, max_messages=5)) == 5


def test_failed_decode_leaves_a_mutable_buffer_untouched():
    data = bytearray(jsonl(wire("e1", text("a")), {**wire("e2"), "role": 7}))
    before = bytes(data)
    fails("history-field-invalid", decode_canonical_messages_jsonl, data)
    assert bytes(data) == before


def _snapshot():
    messages = decode_canonical_messages_jsonl(
        jsonl(
            wire("e1", text("read it")),
            wire(
                "e2",
                {"type": "toolCall", "id": "c1", "name": "read", "arguments": {"path": "a"}},
                role="assistant",
            ),
            wire(
                "e3",
                {
                    "type": "toolResult",
                    "toolCallId": "c1",
                    "toolName": "read",
                    "content": "x",
                    "isError": False,
                },
                role="tool",
            ),
        )
    )
    return build_runtime_history_snapshot(
        runtime_id="rt", session_id="s1", revision="r1", project_root="/p", messages=messages
    )


def test_snapshot_round_trip_is_byte_stable_and_still_valid():
    snapshot = _snapshot()
    encoded = encode_runtime_history_snapshot(snapshot)
    assert json.loads(encoded)["schemaVersion"] == "runtime-history-v1"
    assert json.loads(encoded)["toolAtomicGroups"][0]["toolCallIds"] == ["c1"]
    decoded = decode_runtime_history_snapshot(encoded)
    assert decoded == snapshot
    assert encode_runtime_history_snapshot(decoded) == encoded
    assert validate_runtime_history_snapshot(decoded) == ()


def test_snapshot_decode_errors_carry_json_paths():
    document = json.loads(encode_runtime_history_snapshot(_snapshot()))
    document["messages"][2]["blocks"][0]["toolCallId"] = "c1\n"
    error = fails("history-identifier-invalid", decode_runtime_history_snapshot, json.dumps(document))
    assert error.path == "$.messages[2].blocks[].toolCallId"
    document = json.loads(encode_runtime_history_snapshot(_snapshot()))
    document["toolAtomicGroups"][0]["messageIds"][0] = "s1:e2\t"
    assert fails(
        "history-identifier-invalid", decode_runtime_history_snapshot, json.dumps(document)
    ).path == ("$.toolAtomicGroups")
    document = json.loads(encode_runtime_history_snapshot(_snapshot()))
    document["runtimeId"] = 12
    assert (
        fails("history-field-invalid", decode_runtime_history_snapshot, json.dumps(document)).path
        == "$.runtimeId"
    )
    document = json.loads(encode_runtime_history_snapshot(_snapshot()))
    document["messages"][0]["blocks"].append({"type": "video"})
    error = fails("history-block-type-unknown", decode_runtime_history_snapshot, json.dumps(document))
    assert error.path == "$.messages[0].blocks[1].type"
    kept = decode_runtime_history_snapshot(json.dumps(document), unknown_blocks="opaque")
    assert kept.messages[0].blocks[1] == OpaqueProviderBlock(original_type="video", value={"type": "video"})
    fails("history-json-malformed", decode_runtime_history_snapshot, b'{"schemaVersion": ')
    fails("history-field-invalid", decode_runtime_history_snapshot, b"[]")
    fails(
        "history-too-many-messages",
        decode_runtime_history_snapshot,
        json.dumps(document),
        max_messages=2,
        unknown_blocks="opaque",
    )


def test_decoded_records_are_the_canonical_types():
    (message,) = decode_canonical_messages_jsonl(
        jsonl(
            wire(
                "e1", {"type": "toolResult", "toolCallId": "c", "toolName": "t", "content": "ok"}, role="tool"
            )
        )
    )
    assert type(message) is CanonicalMessage
    assert message.blocks == (ToolResultBlock(tool_call_id="c", tool_name="t", content="ok", is_error=False),)
