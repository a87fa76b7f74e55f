"""Issue 22: a decoded JSONL history is held within 3x its size, and a tiny message within a fixed cost.

Peaks are the tracemalloc peak of a fresh interpreter, from before the file's bytes are read to the end
of the decode (the bytes count: the caller holds them), so nothing an earlier test left behind counts.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ds4_context_core import CanonicalMessage, HistoryRecordError, MessageFlags, Provenance, TextBlock
from ds4_context_core.history import (
    HISTORY_MAX_NESTING_DEPTH,
    decode_canonical_messages_jsonl,
)

MIB = 1024 * 1024
_MEASURE = """
import sys, tracemalloc
from pathlib import Path
from ds4_context_core.history import decode_canonical_messages_jsonl
tracemalloc.start()
messages = decode_canonical_messages_jsonl(Path(sys.argv[1]).read_bytes())
print(len(messages), tracemalloc.get_traced_memory()[1])
"""


def _record(number: int, shape: str) -> dict[str, object]:
    entry = f"e{number:07d}"
    record: dict[str, object] = {
        "id": f"session:{entry}",
        "sourceEntryId": entry,
        "provenance": {
            "source": "runtime-session",
            "sessionId": "session",
            "entryId": entry,
            "runtimeId": "rt",
        },
    }
    if shape == "tiny":
        return record | {"role": "user", "blocks": [{"type": "text", "text": "ok"}]}
    step = number % 4
    call = f"call-{number - step + 1}"
    if step == 1:
        blocks = [
            {"type": "toolCall", "id": call, "name": "read", "arguments": {"path": f"src/m{number}.py"}}
        ]
        return record | {"role": "assistant", "blocks": blocks, "model": "gpt-5", "flags": {"atomic": True}}
    if step == 2:
        result = {"type": "toolResult", "toolCallId": call, "toolName": "read", "content": "def f():\n" * 3}
        return record | {"role": "tool", "blocks": [result | {"isError": False}], "flags": {"atomic": True}}
    return record | {
        "role": "user",
        "blocks": [{"type": "text", "text": "fix the failing test"}],
        "flags": {},
    }


def _write(path: Path, shape: str, mib: float = 4) -> Path:
    lines, size, number = [], 0, 0
    while size < mib * MIB:
        lines.append(json.dumps(_record(number, shape), separators=(",", ":")).encode() + b"\n")
        size += len(lines[-1])
        number += 1
    path.write_bytes(b"".join(lines))
    return path


def _peak(path: Path) -> tuple[int, int]:
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(path)], capture_output=True, text=True, check=True, timeout=300
    )
    count, peak = done.stdout.split()
    return int(count), int(peak)


def test_a_history_of_short_mixed_messages_is_held_within_3x_its_size(tmp_path):
    # ~280-byte text, tool call and tool result lines: 4.1x before messages shared what repeats
    path = _write(tmp_path / "mixed.jsonl", "mixed")
    count, peak = _peak(path)
    size = path.stat().st_size
    assert count > 15_000
    assert size / count < 300
    assert peak < 3 * size, f"{peak / size:.2f}x the input"


def test_a_tiny_message_costs_a_bounded_number_of_bytes(tmp_path):
    # The smallest messages cannot stay within 3x of their line: a Python object has a fixed cost.
    # The documented bound (docs/core/history.md): about 420 bytes a message beyond the input for a
    # message with one short text block (it was 720).
    path = _write(tmp_path / "tiny.jsonl", "tiny")
    count, peak = _peak(path)
    size = path.stat().st_size
    assert count > 15_000
    assert (peak - size) / count < 450, f"{(peak - size) / count:.0f} bytes a message"


def test_decoded_messages_share_what_a_history_repeats():
    data = b"".join(json.dumps(_record(n, "mixed"), separators=(",", ":")).encode() + b"\n" for n in range(8))
    messages = decode_canonical_messages_jsonl(data)
    assert messages == decode_canonical_messages_jsonl(data)  # equal values, whatever is shared
    assert len({id(message.provenance.session_id) for message in messages}) == 1
    assert len({id(message.provenance.runtime_id) for message in messages}) == 1
    assert all(message.provenance.entry_id is message.source_entry_id for message in messages)
    assert len({id(message.flags) for message in messages}) == 2  # {} and {"atomic": true}
    assert messages[1].flags == MessageFlags(atomic=True)


def test_messages_built_with_wrong_types_are_still_built():
    # Python constructors check no types (validation does); sharing must not turn a bad value into a
    # raw exception at construction, nor change it.
    provenance = Provenance(source="runtime-session", session_id=["s"], entry_id={"e": 1})  # type: ignore[arg-type]
    odd = CanonicalMessage(
        id="s:1",
        source_entry_id="1",
        role="user",
        blocks=(TextBlock(text="hi"),),
        provenance=provenance,
        provider=["p"],  # type: ignore[arg-type]
        flags=MessageFlags(pinned=[True]),  # type: ignore[arg-type]
    )
    other = CanonicalMessage(
        id="s:2",
        source_entry_id="2",
        role="user",
        blocks=(),
        provenance={"x": 1},
        flags={},  # type: ignore[arg-type]
    )
    assert odd.provider == ["p"]
    assert odd.flags.pinned == [True]
    assert odd.provenance.session_id == ["s"]
    assert other.flags == {}
    assert other.provenance == {"x": 1}


def _line(number: int, shape: str = "mixed") -> bytes:
    return json.dumps(_record(number, shape), separators=(",", ":")).encode() + b"\n"


def test_errors_past_the_first_chunk_keep_their_order_and_lines():
    # the decoder works a chunk of lines at a time: errors still come out as from one pass
    good = b"".join(_line(n) for n in range(12_000))  # about 2 MiB: three chunks
    lines = good.count(b"\n")
    bad_identifier = _line(99_999).replace(b'"sourceEntryId":"e0099999"', b'"sourceEntryId":"e\\u0001"')
    deep = (
        b'{"id":"s:d","sourceEntryId":"d","role":"assistant","blocks":[{"type":"toolCall","id":"c","name":"f",'
        b'"arguments":{"x":' + b"[" * HISTORY_MAX_NESTING_DEPTH + b"]" * HISTORY_MAX_NESTING_DEPTH + b"}}],"
        b'"provenance":{"source":"runtime-session","sessionId":"s","entryId":"d"}}\n'
    )
    broken = b'{"id":\n'
    cases = [
        (bad_identifier + good + deep + good + broken, "history-json-malformed", 2 * lines + 3),
        (good + deep + good + bad_identifier, "history-identifier-invalid", 2 * lines + 2),
        (good + b"\n" + good + deep, "history-nesting-too-deep", 2 * lines + 2),
    ]
    for data, code, line in cases:
        with pytest.raises(HistoryRecordError) as caught:
            decode_canonical_messages_jsonl(data)
        assert (caught.value.code, caught.value.line) == (code, line)
    assert len(decode_canonical_messages_jsonl(good + b"\n\n" + good)) == 2 * lines
