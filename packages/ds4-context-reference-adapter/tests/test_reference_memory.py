"""Issue 22: reading a reference history holds within 3x the file, grouping and validation included.

Measured in a fresh interpreter: the tracemalloc peak of ``read_reference_history`` (the read of the
file's bytes included) against the file size.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import msgspec

from ds4_context_core import (
    CanonicalMessage,
    MessageFlags,
    Provenance,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from ds4_context_reference_adapter import DEFAULT_RUNTIME_ID, create_reference_history

MIB = 1024 * 1024
_SESSION = "memory-session"
_MEASURE = """
import sys, tracemalloc
from ds4_context_reference_adapter import ReferenceHistoryLimits, read_reference_history
tracemalloc.start()
history = read_reference_history(sys.argv[1], limits=ReferenceHistoryLimits(max_messages=1_000_000))
print(len(history.messages), len(history.snapshot.tool_atomic_groups), tracemalloc.get_traced_memory()[1])
"""


def _message(number: int) -> CanonicalMessage:
    entry = f"e{number:07d}"
    step = number % 4
    call = f"call-{number - step + 1}"
    if step == 1:
        role, blocks = (
            "assistant",
            (ToolCallBlock(id=call, name="read", arguments={"path": f"m{number}.py"}),),
        )
    elif step == 2:
        role, blocks = "tool", (ToolResultBlock(tool_call_id=call, tool_name="read", content="def f(): ..."),)
    else:
        role, blocks = "user", (TextBlock(text="please fix the failing test"),)
    return CanonicalMessage(
        id=f"{_SESSION}:{entry}",
        source_entry_id=entry,
        role=role,  # type: ignore[arg-type]
        blocks=blocks,
        provenance=Provenance(
            source="runtime-session", session_id=_SESSION, entry_id=entry, runtime_id=DEFAULT_RUNTIME_ID
        ),
        flags=MessageFlags(atomic=True) if step in (1, 2) else MessageFlags(),
    )


def _peak(path: Path) -> tuple[int, int, int]:
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(path)], capture_output=True, text=True, check=True, timeout=300
    )
    messages, groups, peak = map(int, done.stdout.split())
    return messages, groups, peak


def test_a_history_of_short_records_is_read_within_3x_its_size(tmp_path: Path) -> None:
    # ~300-byte records (text, tool calls, their results): 3.6x before the bytes were dropped before
    # grouping and validation, and before messages shared what repeats
    project = tmp_path / "project"
    project.mkdir()
    path = tmp_path / "history.jsonl"
    create_reference_history(path, session_id=_SESSION, project_root=project)
    encoder = msgspec.json.Encoder()
    records, size, number = [], path.stat().st_size, 0
    while size < 4 * MIB:
        records.append(encoder.encode({"type": "message", "message": _message(number)}) + b"\n")
        size += len(records[-1])
        number += 1
    with path.open("ab") as handle:
        handle.write(b"".join(records))
    messages, groups, peak = _peak(path)
    size = path.stat().st_size
    assert messages == number > 10_000
    assert groups == (number + 2) // 4
    assert size / messages < 350
    assert peak < 3 * size, f"{peak / size:.2f}x the file"
