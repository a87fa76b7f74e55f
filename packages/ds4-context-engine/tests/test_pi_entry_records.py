"""Typed records of what Pi writes: summaries, reported usage and custom entries, read from real files."""

from __future__ import annotations

import json

from ds4_context_engine.pi import (
    PiCustomEntry,
    append_pi_custom_entry,
    append_pi_entries,
    append_pi_entry,
    create_pi_session,
    extend_pi_session,
    pi_custom_entries,
    pi_entry_texts,
    pi_is_tool_output,
    pi_reported_usages,
    pi_summaries,
    read_pi_session,
    read_pi_session_bytes,
)


def _message(role, content, **extra):
    return ("message", {"message": {"role": role, "content": content, "timestamp": 0, **extra}})


def _session(tmp_path, entries):
    path = tmp_path / "s.jsonl"
    create_pi_session(path, cwd=str(tmp_path), session_id="records")
    written = append_pi_entries(path, entries, parent_id=None)
    return path, read_pi_session(path), [entry.id for entry in written]


def test_summaries_are_typed_and_each_kind_keeps_only_its_own_link(tmp_path):
    path, _, ids = _session(
        tmp_path, [_message("user", "first"), _message("user", "second"), _message("user", "third")]
    )
    append_pi_entry(
        path,
        "compaction",
        {"summary": "cut", "firstKeptEntryId": ids[1], "tokensBefore": 4000, "fromId": ids[0]},
    )
    append_pi_entry(path, "compaction", {"summary": 7, "firstKeptEntryId": 3, "tokensBefore": -1})
    append_pi_entry(
        path,
        "branch_summary",
        {"summary": "left", "fromId": ids[2], "firstKeptEntryId": ids[1], "tokensBefore": True},
    )
    summaries = pi_summaries(read_pi_session(path))
    assert [(s.kind, s.text, s.tokens_before) for s in summaries] == [
        ("compaction", "cut", 4000),
        ("compaction", "", None),  # not text, negative
        ("branch-summary", "left", None),  # a bool is no count
    ]
    assert [(s.first_kept_entry_id, s.from_id) for s in summaries] == [
        (ids[1], None),
        (None, None),
        (None, ids[2]),
    ]


def test_entry_texts_are_what_a_summary_could_quote(tmp_path):
    call = {
        "type": "toolCall",
        "id": "c1",
        "name": "read",
        "arguments": {"path": "src/app.py", "lines": [1, 2]},
    }
    _, session, _ = _session(
        tmp_path,
        [
            _message("assistant", [{"type": "thinking", "thinking": "look"}, call]),
            _message("toolResult", [{"type": "text", "text": "body"}], toolCallId="c1", toolName="read"),
            ("branch_summary", {"summary": "gone", "fromId": "x", "details": {"files": ["a.py"], "n": 2}}),
            ("custom_message", {"customType": "note", "content": "remember", "display": True}),
            ("custom", {"customType": "ds4-context.pin", "data": {"entryId": "x"}}),
        ],
    )
    assert [pi_entry_texts(entry) for entry in session.entries] == [
        ("look", "read", "src/app.py", "1", "2"),
        ("body", "read"),
        ("gone", "a.py", "2"),
        ("remember",),
        (),
    ]
    assert [pi_is_tool_output(entry) for entry in session.entries] == [False, True, False, False, False]


def test_reported_usage_of_each_assistant_message(tmp_path):
    usage = {"input": 900, "output": 50, "cacheRead": 100, "cacheWrite": 0, "totalTokens": 1050}
    _, session, ids = _session(
        tmp_path,
        [
            _message("user", "go"),
            _message("assistant", "a", provider="openai", model="m", usage=usage, stopReason="stop"),
            _message("assistant", "b", provider="", model="m", usage=usage, stopReason="aborted"),
            _message("assistant", "c", provider="openai", model=5, usage={"output": 3}, stopReason="error"),
            _message("assistant", "d", provider="openai", model="m"),  # no usage: not counted
            _message("toolResult", "e", toolCallId="c", toolName="t", usage=usage),
        ],
    )
    usages = pi_reported_usages(session)
    assert [(u.entry.id, u.input_tokens, u.provider, u.model, u.complete) for u in usages] == [
        (ids[1], 1000, "openai", "m", True),
        (ids[2], 1000, None, "m", False),
        (ids[3], None, "openai", None, False),
    ]


def test_reported_usages_of_two_sessions_grown_from_one_are_their_own():
    # both grown sessions share their parent's memo and have as many entries: neither gets the other's
    header = b'{"type":"session","version":3,"id":"fork","timestamp":"","cwd":"/p"}\n'
    tail = (
        b'{"type":"message","id":"%s","parentId":null,"message":{"role":"assistant","content":"x",'
        b'"provider":"openai","model":"m","usage":{"input":%d,"output":1}}}\n'
    )
    base = read_pi_session_bytes(header)
    assert pi_reported_usages(base) == ()
    one = extend_pi_session(base, tail % (b"a", 10))
    two = extend_pi_session(base, tail % (b"b", 20))
    assert two.context_memo is one.context_memo
    assert [(u.entry.id, u.input_tokens) for u in pi_reported_usages(one)] == [("a", 10)]
    assert [(u.entry.id, u.input_tokens) for u in pi_reported_usages(two)] == [("b", 20)]
    longer = extend_pi_session(two, tail % (b"c", 30))
    assert [u.entry.id for u in pi_reported_usages(longer)] == ["b", "c"]
    assert [u.entry.id for u in pi_reported_usages(one)] == ["a"]


def test_custom_entries_round_trip_and_are_told_apart_by_type(tmp_path):
    path, _, _ = _session(tmp_path, [_message("user", "go")])
    first = append_pi_custom_entry(path, "ours", {"n": 1, "text": "a\u2028b"})
    append_pi_custom_entry(path, "theirs", [1, 2])
    append_pi_entry(path, "custom", {"customType": 3, "data": {"n": 2}})
    append_pi_entry(path, "custom", {"customType": "ours"})
    lines = [json.loads(line) for line in path.read_bytes().split(b"\n") if line]
    assert {k: lines[2][k] for k in ("type", "customType", "data")} == {
        "type": "custom",
        "customType": "ours",
        "data": {"n": 1, "text": "a\u2028b"},
    }
    session = read_pi_session(path)
    ours = pi_custom_entries(session, "ours")
    assert [(c.entry.id, c.value) for c in ours] == [
        (first.id, {"n": 1, "text": "a\u2028b"}),
        (ours[1].entry.id, None),
    ]
    assert [c.value for c in pi_custom_entries(session, "theirs")] == [[1, 2]]
    assert all(isinstance(c, PiCustomEntry) and c.custom_type == "ours" for c in ours)
    assert pi_custom_entries(session, "nobody") == ()
