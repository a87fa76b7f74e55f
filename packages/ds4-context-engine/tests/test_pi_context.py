"""The model context Pi would build for a branch, as canonical messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from ds4_context_core import (
    ImageBlock,
    OpaqueProviderBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    build_canonical_tool_atomic_groups,
)
from ds4_context_core.history import validate_runtime_history_snapshot
from ds4_context_engine.pi import (
    BRANCH_SUMMARY_PREFIX,
    COMPACTION_SUMMARY_PREFIX,
    PiSessionView,
    append_pi_entries,
    append_pi_entry,
    build_pi_context,
    create_pi_session,
    extend_pi_session,
    read_pi_session,
    read_pi_session_bytes,
)

FIXTURES = Path(__file__).parent / "fixtures" / "pi"
SESSION_ID = "4f1c2a7e-0b5d-4a8e-9c1f-2d3e4f5a6b7c"


def test_coding_session_converts_every_shape():
    context = build_pi_context(read_pi_session(FIXTURES / "v3-coding.jsonl"))
    ids = [message.source_entry_id for message in context.messages]
    assert ids == [
        "a0000003",
        "a0000004",
        "a0000005",
        "a0000006",
        "a0000007",
        "a0000009",
        "a000000c",
        "a000000d",
        "a000000e",
        "a0000010",
    ]
    assert context.excluded_entry_ids == ("a0000008",)
    assert [message.role for message in context.messages] == [
        "user",
        "assistant",
        "tool",
        "tool",
        "tool",
        "user",
        "custom",
        "assistant",
        "tool",
        "assistant",
    ]
    assert (context.provider, context.model_id, context.thinking_level) == (
        "anthropic",
        "claude-sonnet-4-5",
        "medium",
    )
    first = context.messages[0]
    assert first.id == f"{SESSION_ID}:a0000003"
    assert first.provenance.source == "pi-session"
    assert first.provenance.session_id == SESSION_ID
    assert first.provenance.entry_id == "a0000003"
    assert first.created_at == 1772442001000
    assert first.blocks == (TextBlock(text="Fix the failing parser test in src/parse.ts"),)


def test_parallel_tool_calls_thinking_and_images_are_kept():
    context = build_pi_context(read_pi_session(FIXTURES / "v3-coding.jsonl"))
    by_entry = {message.source_entry_id: message for message in context.messages}
    assistant = by_entry["a0000004"]
    assert assistant.blocks[0] == ThinkingBlock(thinking="Read the test and the parser side by side.")
    assert assistant.tool_call_ids == ("call_r1", "call_r2")
    assert assistant.blocks[2] == ToolCallBlock(id="call_r1", name="read", arguments={"path": "src/parse.ts"})
    assert assistant.flags.atomic is True
    assert assistant.provider == "anthropic"
    result = by_entry["a0000006"]
    assert result.blocks == (
        ToolResultBlock(
            tool_call_id="call_r2",
            tool_name="read",
            content="expect(parse('a, b')).toEqual(['a', 'b'])",
            is_error=False,
        ),
    )
    assert result.flags.atomic is True
    image_message = by_entry["a0000009"]
    assert image_message.blocks[1] == ImageBlock(mime_type="image/png", data="iVBORw0KGgo=")
    groups = build_canonical_tool_atomic_groups(context.messages)
    parallel = [group for group in groups if "call_r1" in group.tool_call_ids]
    assert len(parallel) == 1
    assert parallel[0].tool_call_ids == ("call_r1", "call_r2")
    assert parallel[0].complete
    assert len(parallel[0].message_ids) == 3
    assert all(group.complete for group in groups)


def test_bash_execution_becomes_a_tool_message_with_command_output_and_exit_code():
    context = build_pi_context(read_pi_session(FIXTURES / "v3-coding.jsonl"))
    bash = next(message for message in context.messages if message.source_entry_id == "a0000007")
    assert bash.role == "tool"
    assert bash.provenance.original_role == "bashExecution"
    (block,) = bash.blocks
    assert isinstance(block, TextBlock)
    assert block.text.startswith("$ npm test -- parse\nFAIL test/parse.test.ts")
    assert block.text.endswith("[exit code 1]")


def test_compaction_emits_summary_then_kept_entries_then_later_ones():
    context = build_pi_context(read_pi_session(FIXTURES / "v3-compacted.jsonl"))
    assert [message.source_entry_id for message in context.messages] == [
        "c0000005",
        "c0000003",
        "c0000004",
        "c0000006",
        "c0000008",
    ]
    summary = context.messages[0]
    assert summary.role == "user"
    assert summary.provenance.original_role == "compactionSummary"
    assert summary.blocks == (
        TextBlock(
            text=COMPACTION_SUMMARY_PREFIX + "Goal: port CLI flags to typer. Constraint: keep --verbose."
        ),
    )
    assert context.compaction_entry_id == "c0000005"


def test_v1_compaction_by_index_and_header_model():
    session = read_pi_session(FIXTURES / "v1-legacy.jsonl")
    context = build_pi_context(session)
    ids = [entry.id for entry in session.entries]
    assert [message.source_entry_id for message in context.messages] == [ids[4], ids[3], ids[5], ids[6]]
    assert [message.role for message in context.messages] == ["user", "assistant", "custom", "user"]
    assert context.messages[2].blocks == (TextBlock(text="Remember to run the linter"),)
    assert (context.provider, context.model_id, context.thinking_level) == ("openai", "gpt-4.1", "off")


def test_branch_summary_and_model_change_on_the_active_branch():
    session = read_pi_session(FIXTURES / "v2-branches.jsonl")
    active = build_pi_context(session)
    assert [message.source_entry_id for message in active.messages] == [
        "b0000001",
        "b0000005",
        "b0000006",
        "b0000008",
    ]
    assert active.messages[1].blocks == (
        TextBlock(
            text=BRANCH_SUMMARY_PREFIX
            + "An express handler was written to src/health.js but the project uses fastify."
        ),
    )
    assert active.model_id == "gpt-4.1-mini"
    abandoned = build_pi_context(session, "b0000004")
    assert [message.role for message in abandoned.messages] == ["user", "assistant", "tool", "user"]
    assert abandoned.model_id == "gpt-4o"


def test_unknown_roles_and_blocks_are_reported_or_kept_never_silently_dropped():
    context = build_pi_context(read_pi_session(FIXTURES / "corrupt.jsonl"))
    assert [message.source_entry_id for message in context.messages] == ["d0000003"]
    assert context.excluded_entry_ids == ("d0000004",)
    assert [issue.code for issue in context.issues] == ["pi-parent-dangling", "pi-message-role-unknown"]
    data = (
        b'{"type":"session","version":3,"id":"s","timestamp":"t","cwd":"/p"}\n'
        b'{"type":"message","id":"00000001","parentId":null,"timestamp":"t","message":{"role":"assistant",'
        b'"content":[{"type":"redacted_thinking","data":"abc"}]}}\n'
    )
    (message,) = build_pi_context(read_pi_session_bytes(data)).messages
    assert message.blocks == (
        OpaqueProviderBlock(
            original_type="redacted_thinking", value={"type": "redacted_thinking", "data": "abc"}
        ),
    )


def test_pinned_entries_are_flagged():
    context = build_pi_context(read_pi_session(FIXTURES / "v3-coding.jsonl"), pinned_entry_ids={"a0000003"})
    assert [m.source_entry_id for m in context.messages if m.flags.pinned] == ["a0000003"]


def test_a_context_grown_by_appends_equals_one_built_from_a_fresh_read(tmp_path):
    """The incremental path (memoized entries, an extended context) gives exactly a full rebuild."""
    path = tmp_path / "grown.jsonl"
    create_pi_session(path, cwd=str(tmp_path), session_id="grown")

    def message(role, content, **extra):
        return ("message", {"message": {"role": role, "content": content, "timestamp": 0, **extra}})

    view = PiSessionView(path)
    steps = [
        [message("user", "Fix the parser.")],
        [
            message(
                "assistant", [{"type": "toolCall", "id": "c1", "name": "read", "arguments": {"path": "p.py"}}]
            ),
            message(
                "toolResult", [{"type": "text", "text": "def p(): ..."}], toolCallId="c1", toolName="read"
            ),
        ],
        [("model_change", {"provider": "anthropic", "modelId": "claude-sonnet-4-5"})],
        [message("assistant", [{"type": "text", "text": "Done."}], provider="openai", model="gpt-4.1")],
        [("thinking_level_change", {"thinkingLevel": "high"}), message("user", "Now the tests.")],
        [("custom_message", {"customType": "note", "content": "remember p.py", "display": True})],
        [("session_info", {"name": "parser work"}), message("user", "And the docs.")],
    ]
    pinned: set[str] = set()
    for number, batch in enumerate(steps):
        written = append_pi_entries(path, batch)
        if number == 3:
            pinned.add(written[0].id)  # a pin changes what an already converted entry becomes
        if number == 5:
            append_pi_entry(path, "label", {"targetId": written[0].id, "label": "note"})
        session = view.refresh()
        grown = build_pi_context(session, pinned_entry_ids=pinned)
        fresh = build_pi_context(read_pi_session(path), pinned_entry_ids=pinned)
        assert grown == fresh
        assert build_pi_context(session, pinned_entry_ids=pinned) is grown  # nothing new: the same object
    # a compaction, then a new branch off an older entry: rebuilt, still equal to a fresh read
    first_kept = fresh.messages[-2].source_entry_id
    append_pi_entry(
        path, "compaction", {"summary": "work so far", "firstKeptEntryId": first_kept, "tokensBefore": 9}
    )
    append_pi_entries(path, [message("user", "Continue.")])
    session = view.refresh()
    assert build_pi_context(session) == build_pi_context(read_pi_session(path))
    append_pi_entries(
        path, [message("user", "Try another way.")], parent_id=fresh.messages[0].source_entry_id
    )
    session = view.refresh()
    assert build_pi_context(session) == build_pi_context(read_pi_session(path))
    assert [m.source_entry_id for m in build_pi_context(session).messages][-1] == session.entries[-1].id


def test_a_rebuilt_context_reports_again_what_converting_an_entry_reported():
    # a rebuild reuses the remembered context's messages, but not those of entries an issue names
    header = b'{"type":"session","version":3,"id":"again","timestamp":"","cwd":"/p"}\n'
    lines = [
        b'{"type":"message","id":"a","parentId":null,"message":{"role":"user","content":7}}\n',
        b'{"type":"message","id":"b","parentId":"a","message":{"role":"user","content":"fine"}}\n',
    ]
    session = read_pi_session_bytes(header + b"".join(lines))
    first = build_pi_context(session)
    assert [(issue.code, issue.entry_id) for issue in first.issues] == [("pi-message-field-invalid", "a")]
    again = build_pi_context(session, "b")  # an explicit leaf: rebuilt
    assert again == first
    assert again.messages[1] is first.messages[1]  # the clean entry's message is reused


def test_a_rebuilt_context_reuses_the_messages_already_converted():
    # a rebuild reuses the remembered context's messages, matched by entry id; ids are any strings
    header = b'{"type":"session","version":3,"id":"memo","timestamp":"","cwd":"/p"}\n'
    lines = [
        b'{"type":"message","id":"context","parentId":null,"message":{"role":"user","content":"a"}}\n',
        b'{"type":"message","id":"usages","parentId":"context","message":{"role":"user","content":"b"}}\n',
        b'{"type":"message","id":"entry messages","parentId":"usages",'
        b'"message":{"role":"user","content":"c"}}\n',
    ]
    session = read_pi_session_bytes(header + b"".join(lines))
    first = build_pi_context(session)
    again = build_pi_context(session, "entry messages")  # an explicit leaf: rebuilt from the memo
    assert again.messages == first.messages
    assert all(a is b for a, b in zip(again.messages, first.messages, strict=True))
    pinned = build_pi_context(session, "entry messages", pinned_entry_ids={"usages"})
    assert [m.flags.pinned for m in pinned.messages] == [None, True, None]
    assert pinned.messages[0] is first.messages[0]
    assert build_pi_context(session, "entry messages").messages[1].flags.pinned is None
    # two sessions grown from this one share its memo: an equal id appended to each is not mixed up
    tail = (
        b'{"type":"message","id":"x","parentId":"entry messages","message":{"role":"user","content":"%s"}}\n'
    )
    one = extend_pi_session(session, tail % b"one")
    assert build_pi_context(one, "x").messages[-1].blocks == (TextBlock(text="one"),)
    two = extend_pi_session(session, tail % b"two")
    assert two.context_memo is one.context_memo
    assert build_pi_context(two, "x").messages[-1].blocks == (TextBlock(text="two"),)


def test_sessions_grown_from_one_session_never_get_each_others_context():
    # the grown sessions share their parent's memo; the context remembered for one is not the other's
    header = b'{"type":"session","version":3,"id":"fork","timestamp":"","cwd":"/p"}\n'
    root = b'{"type":"message","id":"r","parentId":null,"message":{"role":"user","content":"root"}}\n'
    tail = b'{"type":"message","id":"%s","parentId":"r","message":{"role":"user","content":"%s"}}\n'
    base = read_pi_session_bytes(header + root)
    build_pi_context(base)
    one = extend_pi_session(base, tail % (b"a", b"one"))
    two = extend_pi_session(base, tail % (b"b", b"two"))
    assert two.context_memo is one.context_memo
    first = build_pi_context(one)
    assert [m.blocks for m in first.messages][-1] == (TextBlock(text="one"),)
    # the same number of entries as ``one``: nothing new to extend by, yet not ``one``'s context
    second = build_pi_context(two)
    assert second == build_pi_context(read_pi_session_bytes(header + root + tail % (b"b", b"two")))
    assert second.leaf_id == "b"
    # longer than ``one``: not ``one``'s context grown by ``two``'s later entries either
    three = extend_pi_session(one, tail % (b"c", b"three"))
    longer = extend_pi_session(two, tail % (b"d", b"four") + tail % (b"e", b"five"))
    assert build_pi_context(three).leaf_id == "c"
    fresh = read_pi_session_bytes(header + root + tail % (b"b", b"two") + tail % (b"d", b"four"))
    fresh = extend_pi_session(fresh, tail % (b"e", b"five"))
    assert build_pi_context(longer) == build_pi_context(fresh)
    # and the first one is still its own
    assert build_pi_context(one) == first


_OTHER_TYPES = (7, 1.5, True, ["a", 1], {"text": "a"})
# (entry fields, what the message holds in place of the value) for every field Pi writes as a string
_TYPED_FIELDS = (
    ({"type": "message", "message": {"role": "user", "content": "VALUE"}}, "opaque"),
    (
        {"type": "message", "message": {"role": "user", "content": [{"type": "text", "text": "VALUE"}]}},
        "opaque",
    ),
    (
        {
            "type": "message",
            "message": {"role": "assistant", "content": [{"type": "thinking", "thinking": "VALUE"}]},
        },
        "opaque",
    ),
    (
        {
            "type": "message",
            "message": {"role": "assistant", "content": [{"type": "toolCall", "id": "c1", "name": "VALUE"}]},
        },
        "opaque",
    ),
    (
        {
            "type": "message",
            "message": {"role": "toolResult", "toolCallId": "c1", "toolName": "read", "content": "VALUE"},
        },
        "opaque",
    ),
    (
        {
            "type": "message",
            "message": {"role": "toolResult", "toolCallId": "VALUE", "toolName": "read", "content": "x"},
        },
        "",
    ),
    ({"type": "message", "message": {"role": "bashExecution", "command": "VALUE", "output": "x"}}, "text"),
    ({"type": "message", "message": {"role": "branchSummary", "summary": "VALUE"}}, "text"),
    ({"type": "custom_message", "customType": "note", "content": "VALUE"}, "opaque"),
    ({"type": "branch_summary", "summary": "VALUE"}, "text"),
)


def _with_value(fields, value):
    if fields == "VALUE":
        return value
    if isinstance(fields, dict):
        return {key: _with_value(item, value) for key, item in fields.items()}
    if isinstance(fields, list):
        return [_with_value(item, value) for item in fields]
    return fields


@pytest.mark.parametrize("value", _OTHER_TYPES, ids=lambda value: type(value).__name__)
@pytest.mark.parametrize(("fields", "kept"), _TYPED_FIELDS)
def test_a_text_field_of_another_type_is_reported_with_a_code_never_a_type_error(
    tmp_path, fields, kept, value
):
    path = tmp_path / "session.jsonl"
    create_pi_session(path, cwd=str(tmp_path))
    entry = append_pi_entry(
        path, fields["type"], _with_value({k: v for k, v in fields.items() if k != "type"}, value)
    )
    view = PiSessionView(path)
    context = view.context()
    (issue,) = context.issues
    assert (issue.code, issue.entry_id, issue.line) == ("pi-message-field-invalid", entry.id, 2)
    assert repr(value) not in issue.message  # never the value
    (message,) = context.messages
    opaque = [block.value for block in message.blocks if isinstance(block, OpaqueProviderBlock)]
    if kept == "opaque":  # the value is sent as it was, not dropped: whole, or a content list item by item
        whole = any(
            value == found or (isinstance(found, dict) and value in found.values()) for found in opaque
        )
        items = isinstance(value, list) and all(item in opaque for item in value if not isinstance(item, str))
        assert whole or items
    snapshot = view.snapshot(context, runtime_id="pi", project_root=str(tmp_path))
    # a lone tool result is orphaned: validation says so with its code, nothing else is wrong
    issues = validate_runtime_history_snapshot(snapshot, trusted_project_root=str(tmp_path))
    assert {issue.code for issue in issues} <= {"tool-result-orphaned"}


def test_a_compaction_summary_of_another_type_is_reported(tmp_path):
    path = tmp_path / "session.jsonl"
    create_pi_session(path, cwd=str(tmp_path))
    first = append_pi_entry(path, "message", {"message": {"role": "user", "content": "hi"}})
    compaction = append_pi_entry(
        path, "compaction", {"summary": ["not", "text"], "firstKeptEntryId": first.id}
    )
    context = build_pi_context(read_pi_session(path))
    assert [(issue.code, issue.entry_id) for issue in context.issues] == [
        ("pi-message-field-invalid", compaction.id)
    ]
    assert context.messages[0].blocks == (TextBlock(text=COMPACTION_SUMMARY_PREFIX),)


def test_the_latest_valid_setting_and_the_last_compaction_of_the_branch_win(tmp_path):
    """Model, thinking level and compaction are read from the branch's end: each one's latest counts."""
    path = tmp_path / "settings.jsonl"
    create_pi_session(path, cwd=str(tmp_path), session_id="settings")

    def message(role, content, **extra):
        return ("message", {"message": {"role": role, "content": content, "timestamp": 0, **extra}})

    first = append_pi_entries(
        path,
        [
            ("thinking_level_change", {"thinkingLevel": "low"}),
            message("user", "Start."),
            message("assistant", [{"type": "text", "text": "a"}], provider="openai", model="gpt-4.1"),
            ("model_change", {"provider": "anthropic", "modelId": "claude-sonnet-4-5"}),
            ("compaction", {"summary": "first", "firstKeptEntryId": None, "tokensBefore": 5}),
            ("thinking_level_change", {"thinkingLevel": "high"}),
        ],
    )
    kept = append_pi_entries(path, [message("user", "Go on.")])
    append_pi_entries(
        path,
        [
            ("compaction", {"summary": "second", "firstKeptEntryId": kept[0].id, "tokensBefore": 7}),
            ("thinking_level_change", {"thinkingLevel": 3}),  # not a string: ignored
            ("model_change", {"provider": "openai", "modelId": None}),  # incomplete: ignored
            message("assistant", [{"type": "text", "text": "b"}], provider="openai"),  # no model: ignored
            message("user", "More."),
        ],
    )
    context = build_pi_context(read_pi_session(path))
    assert (context.provider, context.model_id, context.thinking_level) == (
        "anthropic",
        "claude-sonnet-4-5",
        "high",
    )
    assert context.messages[0].blocks == (TextBlock(text=COMPACTION_SUMMARY_PREFIX + "second"),)
    assert [message.source_entry_id for message in context.messages[1:2]] == [kept[0].id]
    assert context.compaction_entry_id not in {entry.id for entry in first}
    # the branch before the second compaction: the first compaction, the header's settings otherwise
    older = build_pi_context(read_pi_session(path), kept[0].id)
    assert older.compaction_entry_id == first[4].id
    assert (older.provider, older.model_id, older.thinking_level) == (
        "anthropic",
        "claude-sonnet-4-5",
        "high",
    )
