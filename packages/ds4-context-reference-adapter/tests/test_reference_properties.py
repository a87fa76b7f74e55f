"""Properties of the history file over generated histories and damaged bytes."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference_helpers import make_message

from ds4_context_core import TextBlock, ToolCallBlock, ToolResultBlock
from ds4_context_reference_adapter import (
    ReferenceHistoryError,
    append_reference_history_message,
    create_reference_history,
    read_reference_history,
)

SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

texts = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)


@st.composite
def histories(draw: st.DrawFn) -> list:
    """User texts and tool exchanges in a valid order (every result after its call)."""
    messages = []
    for number in range(draw(st.integers(min_value=0, max_value=12))):
        if draw(st.booleans()):
            messages.append(make_message(f"u{number}", TextBlock(text=draw(texts))))
        else:
            call = ToolCallBlock(id=f"c{number}", name="read", arguments={"path": draw(texts)})
            messages.append(make_message(f"a{number}", call, role="assistant"))
            result = ToolResultBlock(tool_call_id=f"c{number}", tool_name="read", content=draw(texts))
            messages.append(make_message(f"t{number}", result, role="tool"))
    return messages


def _fresh_history(scratch: str) -> Path:
    project = Path(tempfile.mkdtemp(dir=scratch))
    path = project.parent / f"{project.name}.jsonl"
    create_reference_history(path, session_id="session-1", project_root=project)
    return path


@SETTINGS
@given(messages=histories())
def test_whatever_is_appended_reads_back_identically(tmp_path, messages):
    path = _fresh_history(str(tmp_path))
    for message in messages:
        append_reference_history_message(path, message)
    history = read_reference_history(path)
    assert list(history.messages) == messages
    assert history.revision == hashlib.sha256(path.read_bytes()).hexdigest()
    assert all(group.complete for group in history.snapshot.tool_atomic_groups)


@SETTINGS
@given(messages=histories(), data=st.data())
def test_a_cut_or_flipped_byte_is_rejected_with_a_code_and_never_rewritten(tmp_path, messages, data):
    path = _fresh_history(str(tmp_path))
    for message in messages:
        append_reference_history_message(path, message)
    original = path.read_bytes()
    if data.draw(st.booleans(), label="truncate"):
        cut = data.draw(st.integers(min_value=0, max_value=len(original) - 1), label="cut")
        damaged = original[:cut]
    else:
        position = data.draw(st.integers(min_value=0, max_value=len(original) - 1), label="position")
        value = data.draw(st.integers(min_value=0, max_value=255).filter(lambda b: b != original[position]))
        damaged = original[:position] + bytes([value]) + original[position + 1 :]
    path.write_bytes(damaged)
    code = None
    try:
        history = read_reference_history(path)
    except ReferenceHistoryError as error:
        code = error.code
    else:
        # Some damage is still a valid history (a cut on a line boundary, a changed letter in a text);
        # it must then describe exactly the bytes on disk.
        assert history.revision == hashlib.sha256(damaged).hexdigest()
        assert damaged.endswith(b"\n")
    assert code in (
        None,
        "canonical-history-read-failed",
        "canonical-history-identity-mismatch",
        "canonical-history-invalid",
    )
    assert path.read_bytes() == damaged
    assert os.stat(path).st_size == len(damaged)
