"""Snapshot validation: every planted defect is reported with its code, nothing is repaired."""

from __future__ import annotations

import hashlib

import msgspec
import pytest

from ds4_context_core import (
    CanonicalMessage,
    HistoryError,
    HistoryValidationError,
    MessageFlags,
    Provenance,
    RuntimeHistorySnapshot,
    RuntimeToolAtomicGroup,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from ds4_context_core.history import (
    HISTORY_VALIDATION_CODES,
    HistoryValidationIssue,
    assert_valid_runtime_history_snapshot,
    build_runtime_history_snapshot,
    validate_runtime_history_snapshot,
)

RUNTIME = "rt"
SESSION = "sess"
ROOT = "/workspace/project"


def message(
    entry: str, *blocks, role: str = "assistant", session: str = SESSION, runtime: str | None = RUNTIME
):
    return CanonicalMessage(
        id=f"{SESSION}:{entry}",
        source_entry_id=entry,
        role=role,  # type: ignore[arg-type]
        blocks=blocks,
        provenance=Provenance(
            source="runtime-session", session_id=session, entry_id=entry, runtime_id=runtime
        ),
        flags=MessageFlags(atomic=True)
        if any(isinstance(b, ToolCallBlock | ToolResultBlock) for b in blocks)
        else MessageFlags(),
    )


def call(call_id: str, name: str = "read") -> ToolCallBlock:
    return ToolCallBlock(id=call_id, name=name, arguments={"path": "a.py"})


def result(call_id: str, name: str = "read") -> ToolResultBlock:
    return ToolResultBlock(tool_call_id=call_id, tool_name=name, content="ok")


def history() -> list[CanonicalMessage]:
    return [
        message("u1", TextBlock(text="read both files"), role="user"),
        message("a1", call("c1"), call("c2")),
        message("t1", result("c1"), role="tool"),
        message("t2", result("c2"), role="tool"),
        message("a2", TextBlock(text="done")),
    ]


def snapshot(messages=None, **overrides) -> RuntimeHistorySnapshot:
    built = build_runtime_history_snapshot(
        runtime_id=RUNTIME,
        session_id=SESSION,
        revision="rev-1",
        project_root=ROOT,
        messages=history() if messages is None else messages,
    )
    return msgspec.structs.replace(built, **overrides) if overrides else built


def codes(snap: RuntimeHistorySnapshot, **kwargs) -> list[str]:
    return [issue.code for issue in validate_runtime_history_snapshot(snap, **kwargs)]


def test_valid_snapshot_has_no_issues_and_groups_parallel_calls_together():
    snap = snapshot()
    assert (
        validate_runtime_history_snapshot(snap, expected_runtime_id=RUNTIME, trusted_project_root=ROOT) == ()
    )
    (group,) = snap.tool_atomic_groups
    assert group.message_ids == ("sess:a1", "sess:t1", "sess:t2")
    assert group.tool_call_ids == ("c1", "c2")
    assert group.complete is True
    digest = hashlib.sha256(b"sess:a1\0sess:t1\0sess:t2").hexdigest()[:16]
    assert group.id == "runtime-tool-group:" + digest
    assert assert_valid_runtime_history_snapshot(snap) is snap


def test_codes_are_the_reference_codes_plus_documented_additions():
    assert HISTORY_VALIDATION_CODES[:15] == (
        "history-schema-incompatible",
        "history-identity-invalid",
        "trusted-project-root-missing",
        "history-message-id-missing",
        "history-message-id-duplicate",
        "history-provenance-invalid",
        "tool-call-identity-invalid",
        "tool-result-orphaned",
        "tool-atomic-group-invalid",
        "tool-atomic-message-missing",
        "tool-atomic-message-overlap",
        "tool-atomic-call-overlap",
        "tool-atomic-group-missing",
        "tool-atomic-group-mismatch",
        "tool-atomic-call-unknown",
    )
    assert len(set(HISTORY_VALIDATION_CODES)) == len(HISTORY_VALIDATION_CODES)


def test_wrong_schema_version_is_incompatible():
    assert codes(snapshot(schema_version="runtime-history-v2")) == ["history-schema-incompatible"]


@pytest.mark.parametrize("field", ["runtime_id", "session_id", "revision"])
@pytest.mark.parametrize("bad", ["", "   ", "a\nb", "x" * 513])
def test_blank_or_malformed_identity_is_invalid(field, bad):
    found = codes(snapshot(**{field: bad}))
    assert found[0] == "history-identity-invalid"


def test_identity_mismatch_against_expected_runtime_and_session():
    snap = snapshot()
    assert codes(snap, expected_runtime_id="other") == ["history-identity-mismatch"]
    assert codes(snap, expected_session_id="other") == ["history-identity-mismatch"]
    assert codes(snap, expected_runtime_id=RUNTIME, expected_session_id=SESSION) == []


def test_project_root_missing_relative_untrusted():
    assert codes(snapshot(project_root="")) == ["trusted-project-root-missing"]
    assert codes(snapshot(project_root="relative/dir")) == ["trusted-project-root-invalid"]
    assert codes(snapshot(project_root="/tmp/x\x00y")) == ["trusted-project-root-invalid"]
    assert codes(snapshot(project_root="C:\\work\\project")) == []
    # A parent of the trusted root is a broadening, not a match.
    assert codes(snapshot(), trusted_project_root="/workspace/project/sub") == [
        "trusted-project-root-mismatch"
    ]
    assert codes(snapshot(project_root="/workspace"), trusted_project_root=ROOT) == [
        "trusted-project-root-mismatch"
    ]


def test_missing_duplicate_and_malformed_message_ids():
    messages = history()
    messages[4] = msgspec.structs.replace(messages[4], id="")
    messages[0] = msgspec.structs.replace(messages[0], id="sess:a2")
    messages.append(msgspec.structs.replace(messages[4], id="bad\x1bid"))
    issues = validate_runtime_history_snapshot(snapshot(messages))
    found = [(i.code, i.message_id) for i in issues]
    assert ("history-message-id-missing", None) in found
    assert ("history-message-id-invalid", "bad\\x1bid") in found
    assert ("history-message-id-duplicate", "sess:a2") not in found  # the first occurrence is not a duplicate
    messages.append(msgspec.structs.replace(messages[1], blocks=(TextBlock(text="again"),)))
    found = [(i.code, i.message_id) for i in validate_runtime_history_snapshot(snapshot(messages))]
    assert ("history-message-id-duplicate", "sess:a1") in found


@pytest.mark.parametrize(
    "change",
    [
        {
            "provenance": Provenance(
                source="runtime-session", session_id="other", entry_id="u1", runtime_id=RUNTIME
            )
        },
        {
            "provenance": Provenance(
                source="runtime-session", session_id=SESSION, entry_id="u1", runtime_id="rt2"
            )
        },
        {"provenance": Provenance(source="runtime-session", session_id=SESSION, entry_id="u1")},
        {"source_entry_id": "not-u1"},
    ],
)
def test_provenance_must_match_the_snapshot(change):
    messages = history()
    messages[0] = msgspec.structs.replace(messages[0], **change)
    issues = validate_runtime_history_snapshot(snapshot(messages))
    assert [(i.code, i.message_id) for i in issues] == [("history-provenance-invalid", "sess:u1")]


def test_pi_session_provenance_needs_no_runtime_id():
    messages = [
        msgspec.structs.replace(
            m, provenance=Provenance(source="pi-session", session_id=SESSION, entry_id=m.source_entry_id)
        )
        for m in history()
    ]
    assert codes(snapshot(messages)) == []


def test_duplicate_call_id_and_orphan_result():
    messages = [*history(), message("a3", call("c1")), message("t9", result("ghost"), role="tool")]
    issues = validate_runtime_history_snapshot(snapshot(messages))
    found = {(i.code, i.tool_call_id) for i in issues}
    assert ("tool-call-identity-invalid", "c1") in found
    assert ("tool-result-orphaned", "ghost") in found
    # The groups were built from the same history, so they match it: no group issue is invented.
    assert not any(i.code.startswith("tool-atomic") for i in issues)
    groups = snapshot(messages).tool_atomic_groups
    assert [g.complete for g in groups] == [False, False]


def test_incomplete_live_call_is_valid_but_not_complete():
    messages = [*history(), message("a3", call("c3"))]
    snap = snapshot(messages)
    assert codes(snap) == []
    assert snap.tool_atomic_groups[-1].message_ids == ("sess:a3",)
    assert snap.tool_atomic_groups[-1].complete is False


def test_groups_missing_unknown_mismatched_overlapping_invalid():
    snap = snapshot()
    (good,) = snap.tool_atomic_groups
    assert codes(snap) == []
    assert sorted(codes(msgspec.structs.replace(snap, tool_atomic_groups=()))) == [
        "tool-atomic-group-missing",
        "tool-atomic-group-missing",
    ]
    short = msgspec.structs.replace(good, message_ids=good.message_ids[:2])
    assert codes(msgspec.structs.replace(snap, tool_atomic_groups=(short,))) == [
        "tool-atomic-group-mismatch",
        "tool-atomic-group-mismatch",
    ]
    wrong_flag = msgspec.structs.replace(good, complete=False)
    assert codes(msgspec.structs.replace(snap, tool_atomic_groups=(wrong_flag,))) == [
        "tool-atomic-group-mismatch",
        "tool-atomic-group-mismatch",
    ]
    unknown = RuntimeToolAtomicGroup(id="g", message_ids=("sess:u1",), tool_call_ids=("zz",), complete=False)
    assert codes(msgspec.structs.replace(snap, tool_atomic_groups=(good, unknown))) == [
        "tool-atomic-call-unknown"
    ]
    ghost_member = RuntimeToolAtomicGroup(
        id="g", message_ids=("nope",), tool_call_ids=("zz",), complete=False
    )
    assert codes(msgspec.structs.replace(snap, tool_atomic_groups=(good, ghost_member))) == [
        "tool-atomic-message-missing",
        "tool-atomic-call-unknown",
    ]
    assert codes(msgspec.structs.replace(snap, tool_atomic_groups=(good, good))) == [
        "tool-atomic-message-overlap",
        "tool-atomic-message-overlap",
        "tool-atomic-message-overlap",
        "tool-atomic-call-overlap",
        "tool-atomic-call-overlap",
    ]
    empty = RuntimeToolAtomicGroup(id="", message_ids=(), tool_call_ids=(), complete=True)
    assert codes(msgspec.structs.replace(snap, tool_atomic_groups=(good, empty))) == [
        "tool-atomic-group-invalid"
    ]


def test_every_issue_is_reported_not_only_the_first():
    messages = [*history(), message("t9", result("ghost"), role="tool")]
    messages[0] = msgspec.structs.replace(messages[0], source_entry_id="x")
    snap = snapshot(messages, schema_version="v0", project_root="", tool_atomic_groups=())
    found = codes(snap)
    assert found == [
        "history-schema-incompatible",
        "trusted-project-root-missing",
        "history-provenance-invalid",
        "tool-result-orphaned",
        "tool-atomic-group-missing",
        "tool-atomic-group-missing",
        "tool-atomic-group-missing",
    ]


def test_assert_raises_with_every_issue_and_no_content():
    secret_text = "sk-this-must-never-appear"
    messages = [
        message("u1", TextBlock(text=secret_text), role="user"),
        message("t9", result("ghost"), role="tool"),
    ]
    snap = snapshot(messages, tool_atomic_groups=())
    with pytest.raises(HistoryValidationError) as caught:
        assert_valid_runtime_history_snapshot(snap, expected_session_id="other")
    error = caught.value
    assert isinstance(error, HistoryError)
    assert isinstance(error, ValueError)
    assert error.code == "history-validation-failed"
    assert [i.code for i in error.issues] == [
        "history-identity-mismatch",
        "tool-result-orphaned",
        "tool-atomic-group-missing",
    ]
    assert all(isinstance(i, HistoryValidationIssue) for i in error.issues)
    assert secret_text not in str(error)
    assert "tool-result-orphaned x1" in str(error)
    # The snapshot is left exactly as it was.
    assert snap.tool_atomic_groups == ()
    assert snap.messages == tuple(messages)


def test_issue_with_hostile_identifier_echoes_only_an_escaped_prefix():
    hostile = "call\n" + "A" * 1000
    messages = [message("t1", result(hostile), role="tool")]
    (issue, *_rest) = validate_runtime_history_snapshot(snapshot(messages))
    assert issue.code == "tool-result-orphaned"
    assert issue.tool_call_id is not None
    assert "\n" not in issue.tool_call_id
    assert len(issue.tool_call_id) < 64
    assert issue.tool_call_id.startswith("call\\n")


def test_issue_wire_form_is_camel_case_and_omits_unset_fields():
    issue = HistoryValidationIssue(code="tool-result-orphaned", message="m", tool_call_id="c")
    assert msgspec.json.encode(issue) == b'{"code":"tool-result-orphaned","message":"m","toolCallId":"c"}'


# A snapshot built in Python is not type-checked by msgspec (it checks when decoding): a field of another
# type must be reported with a code, never raise TypeError/AttributeError out of validation.
def _with_provenance(entry: str, **fields):
    plain = message(entry, TextBlock(text="hi"), role="user")
    return msgspec.structs.replace(plain, provenance=msgspec.structs.replace(plain.provenance, **fields))


@pytest.mark.parametrize(
    ("bad_message", "code"),
    [
        (lambda: _with_provenance("u1", session_id=["sess"]), "history-message-shape-invalid"),
        (
            lambda: msgspec.structs.replace(message("u1", role="user"), role=3),
            "history-message-shape-invalid",
        ),
        (
            lambda: msgspec.structs.replace(message("u1", role="user"), role=["user"]),
            "history-message-shape-invalid",
        ),
        (
            lambda: msgspec.structs.replace(message("u1", role="user"), blocks="ab"),
            "history-message-shape-invalid",
        ),
        (
            lambda: msgspec.structs.replace(message("u1", role="user"), id=["sess:u1"]),
            "history-message-shape-invalid",
        ),
        (
            lambda: msgspec.structs.replace(message("u1", role="user"), flags="pinned"),
            "history-message-shape-invalid",
        ),
        (lambda: "not a message", "history-message-shape-invalid"),
        (lambda: _with_provenance("u1", entry_id={"a": 1}), "history-provenance-invalid"),
    ],
)
def test_a_field_of_another_type_is_reported_not_raised(bad_message, code):
    messages = [bad_message(), *history()[1:]]
    valid = snapshot()
    snap = msgspec.structs.replace(valid, messages=tuple(messages))
    found = validate_runtime_history_snapshot(snap)
    assert code in [issue.code for issue in found]
    assert all(issue.message_id is None or isinstance(issue.message_id, str) for issue in found)
    with pytest.raises(HistoryValidationError) as raised:
        assert_valid_runtime_history_snapshot(snap)
    assert raised.value.code == "history-validation-failed"


@pytest.mark.parametrize(
    ("field", "bad", "code"),
    [
        ("session_id", ["sess"], "history-identity-invalid"),
        ("revision", 3, "history-identity-invalid"),
        ("project_root", 7, "trusted-project-root-invalid"),
        ("messages", None, "history-shape-invalid"),
        ("tool_atomic_groups", "groups", "history-shape-invalid"),
    ],
)
def test_a_snapshot_field_of_another_type_is_reported(field, bad, code):
    found = codes(msgspec.structs.replace(snapshot(), **{field: bad}))
    assert code in found


def test_a_group_of_another_type_is_invalid_not_raised():
    valid = snapshot()
    (group,) = valid.tool_atomic_groups
    broken = msgspec.structs.replace(group, message_ids=[["sess:a1"]])
    assert "tool-atomic-group-invalid" in codes(msgspec.structs.replace(valid, tool_atomic_groups=(broken,)))


def test_building_a_snapshot_of_malformed_messages_raises_the_documented_error():
    bad = msgspec.structs.replace(message("u1", role="user"), id=["sess:u1"])
    with pytest.raises(HistoryValidationError) as raised:
        snapshot([bad, *history()[1:]])
    assert [issue.code for issue in raised.value.issues] == ["history-message-shape-invalid"]
    assert "sess:u1" not in str(raised.value)
