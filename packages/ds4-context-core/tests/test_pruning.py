import pytest

import ds4_context_core as core
from ds4_context_core.planner import plan_context
from ds4_context_core.pruning import (
    PRUNING_GATES,
    RECEIPT_HEADER,
    DefaultJudge,
    Judge,
    JudgeCandidate,
    ReceiptCall,
    build_receipt_text,
    contains_evidence,
    identifying_arguments,
    normalize_tool_name,
    trim_text,
)


def candidate(**overrides):
    values = {
        "message_id": "s:r1",
        "tool_call_id": "t1",
        "tool_name": "read",
        "arguments": {"file_path": "src/a.py"},
        "content": "x" * 1000,
        "is_error": False,
        "messages_after": 200,
        "later_reread": False,
        "later_edited": False,
        "has_evidence": False,
    }
    values.update(overrides)
    return JudgeCandidate(**values)


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("ERROR: disk full", True),
        ("raised ValueError in parse", True),
        ("parseError at line 3", True),
        ("1 failed, 20 passed", True),
        ("fail: expected 3", True),
        ("Traceback (most recent call last)", True),
        ("see the stack trace below", True),
        ("# TODO: handle None", True),
        ("no errors found", True),
        ("my_error_handler", True),
        ("turn on debug logging", False),
        ("the errand was run", False),
        ("bugfix release", False),
        ("everything passed", False),
        ("", False),
    ],
)
def test_evidence_words_respect_identifier_and_camel_case_boundaries(text, found):
    assert contains_evidence(text) is found


def test_trim_keeps_head_and_tail_with_one_marker_and_only_when_it_shrinks():
    text = "".join(chr(0x4E00 + i % 50) for i in range(2000))  # code points, not bytes
    trimmed = trim_text(text, 600, 200, "s:r1")
    assert trimmed is not None
    assert trimmed.startswith(text[:600])
    assert trimmed.endswith(text[-200:])
    assert trimmed.count("characters trimmed") == 1
    assert "1200 characters trimmed" in trimmed
    assert "s:r1" not in trimmed  # no id the model has no tool for
    offered = trim_text(text, 600, 200, "s:r1", restore_tool="ds4_restore")
    assert offered is not None
    assert 'call ds4_restore with id "s:r1"' in offered
    assert trim_text("short", 600, 200, "s:r1") is None
    assert trim_text("y" * 850, 600, 200, "s:r1") is None  # a marker longer than what it removes


def test_default_judge_is_deterministic_and_follows_its_signals():
    judge = DefaultJudge()
    assert isinstance(judge, Judge)
    base = candidate()
    old_read = judge.judge([base], goal="g")[0]
    assert judge.judge([base], goal="other goal") == [old_read]
    fresh = judge.judge([candidate(messages_after=1)], goal="g")[0]
    evidence = judge.judge([candidate(has_evidence=True)], goal="g")[0]
    edited = judge.judge([candidate(later_edited=True)], goal="g")[0]
    write = judge.judge([candidate(tool_name="Str_Replace-Editor")], goal="g")[0]
    assert fresh.keep_probability > old_read.keep_probability
    assert evidence.keep_probability >= 0.5 > old_read.keep_probability
    assert edited.keep_probability < old_read.keep_probability
    assert edited.reason == "edited-later"
    assert write.side_effect_probability > 0.5 > old_read.side_effect_probability


def test_tool_names_are_normalised_like_the_reference():
    assert normalize_tool_name("Str_Replace-Editor") == "strreplaceeditor"
    assert normalize_tool_name("WebSearch") == "websearch"


@pytest.mark.parametrize("name", [5, None, b"read", ["read"]])
def test_a_tool_name_that_is_not_a_string_is_a_type_error_in_either_build(name: object) -> None:
    with pytest.raises(TypeError):
        normalize_tool_name(name)  # type: ignore[arg-type]


def test_receipt_text_is_deterministic_and_keeps_identifying_arguments_only():
    calls = [
        ReceiptCall(
            tool_name="read",
            arguments={"file_path": "src/a.py", "limit": 5},
            output_chars=1200,
            is_error=False,
        ),
        ReceiptCall(
            tool_name="grep",
            arguments={"pattern": "def plan", "content": "PAYLOAD"},
            output_chars=30,
            is_error=True,
        ),
        ReceiptCall(
            tool_name="ls", arguments={"content": "PAYLOAD", "depth": 2}, output_chars=10, is_error=False
        ),
    ]
    kwargs = {
        "receipt_id": "ds4-receipt:abc",
        "first_message_id": "s:a1",
        "last_message_id": "s:r3",
        "message_count": 4,
        "calls": calls,
        "assistant_notes": "Reading the planner " + "n" * 500,
        "note_chars": 40,
    }
    text = build_receipt_text(**kwargs)
    assert text == build_receipt_text(**kwargs)
    assert text.startswith(RECEIPT_HEADER)
    assert "3 earlier tool call(s) over 4 message(s)" in text
    assert "1240 characters" in text
    assert "- read src/a.py limit=5 -> 1200 chars" in text
    assert "- grep `def plan` -> 0 hit line(s), failed" in text
    assert "- ls -> 0 hit line(s)" in text
    assert "PAYLOAD" not in text
    assert "ds4-receipt:abc" not in text  # no restore tool offered: no id
    assert "re-run" not in text
    assert 'call ds4_restore with id "ds4-receipt:abc"' in build_receipt_text(
        **kwargs, restore_tool="ds4_restore"
    )
    notes = next(line for line in text.splitlines() if line.startswith("Assistant notes"))
    assert len(notes) < 70


def test_identifying_arguments_cut_long_values():
    assert identifying_arguments({"command": "x" * 500}).endswith("...")
    assert len(identifying_arguments({"command": "x" * 500})) == 120
    assert identifying_arguments("not a dict") == ""


def test_gate_counts_use_only_the_published_gate_names():
    def message(entry, role, *blocks):
        provenance = core.Provenance(source="runtime-session", session_id="s", entry_id=entry)
        return core.CanonicalMessage(
            id=f"s:{entry}", source_entry_id=entry, role=role, blocks=blocks, provenance=provenance
        )

    history = [message("u0", "user", core.TextBlock(text="go"))]
    for i in range(80):
        name = ("read", "bash", "edit")[i % 3]
        content = ("error: boom\n" if i % 4 == 0 else "") + "line\n" * (50 + 40 * (i % 7))
        history.append(message(f"a{i}", "assistant", core.ToolCallBlock(id=f"t{i}", name=name, arguments={})))
        history.append(
            message(
                f"r{i}", "tool", core.ToolResultBlock(tool_call_id=f"t{i}", tool_name=name, content=content)
            )
        )
    history.append(message("u1", "user", core.TextBlock(text="next")))
    model = core.ModelDescriptor(provider="p", id="m", context_window=20_000, max_tokens=2_000)
    plan = plan_context(history, model=model, config={"pruning": {"never_prune_tools": ["bash"]}})
    gates = {gate.gate for gate in plan.manifest.compaction.gate_exclusions}
    assert gates
    assert gates <= set(PRUNING_GATES)
