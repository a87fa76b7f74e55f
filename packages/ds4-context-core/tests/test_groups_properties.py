"""Property tests: random histories with parallel calls, duplicate ids, orphans and interleavings."""

from __future__ import annotations

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ds4_context_core import (
    CanonicalMessage,
    Provenance,
    RuntimeToolAtomicGroup,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from ds4_context_core.history import (
    build_canonical_tool_atomic_groups,
    build_runtime_history_snapshot,
    decode_canonical_messages_jsonl,
    encode_canonical_messages_jsonl,
    validate_runtime_history_snapshot,
)

SETTINGS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CALL_IDS = [f"call-{n}" for n in range(8)]
GHOST_IDS = ["ghost-1", "ghost-2"]


@st.composite
def histories(draw: st.DrawFn) -> list[CanonicalMessage]:
    """Messages whose blocks draw call ids from a small pool, so duplicates, orphans, results in far-away
    messages, several results per message and parallel calls all happen often."""
    count = draw(st.integers(min_value=0, max_value=14))
    messages = []
    for index in range(count):
        kind = draw(st.sampled_from(["text", "calls", "results", "mixed"]))
        blocks: list = []
        if kind in ("text", "mixed"):
            blocks.append(TextBlock(text=draw(st.text(max_size=5))))
        if kind in ("calls", "mixed"):
            for call_id in draw(st.lists(st.sampled_from(CALL_IDS), min_size=1, max_size=3)):
                blocks.append(ToolCallBlock(id=call_id, name="read", arguments={"n": index}))
        if kind in ("results", "mixed"):
            for call_id in draw(st.lists(st.sampled_from(CALL_IDS + GHOST_IDS), min_size=1, max_size=3)):
                blocks.append(ToolResultBlock(tool_call_id=call_id, tool_name="read", content="ok"))
        entry = f"e{index:03d}"
        messages.append(
            CanonicalMessage(
                id=f"s:{entry}",
                source_entry_id=entry,
                role="assistant",
                blocks=tuple(draw(st.permutations(blocks))),
                provenance=Provenance(
                    source="runtime-session", session_id="s", entry_id=entry, runtime_id="rt"
                ),
            )
        )
    return messages


def reference_partition(messages: list[CanonicalMessage]) -> set[frozenset[int]]:
    """Connected components by plain graph search: an oracle independent of the union-find code."""
    ids_of = [
        {b.id for b in m.blocks if isinstance(b, ToolCallBlock)}
        | {b.tool_call_id for b in m.blocks if isinstance(b, ToolResultBlock)}
        for m in messages
    ]
    remaining = {i for i, ids in enumerate(ids_of) if ids}
    components = set()
    while remaining:
        start = remaining.pop()
        component, frontier = {start}, [start]
        while frontier:
            current = frontier.pop()
            for other in list(remaining):
                if ids_of[current] & ids_of[other]:
                    remaining.discard(other)
                    component.add(other)
                    frontier.append(other)
        components.add(frozenset(component))
    return components


def snapshot_of(messages):
    return build_runtime_history_snapshot(
        runtime_id="rt", session_id="s", revision="r", project_root="/p", messages=messages
    )


@SETTINGS
@given(histories())
def test_every_tool_id_lands_in_exactly_one_group(messages):
    groups = build_canonical_tool_atomic_groups(messages)
    all_ids = {b.id for m in messages for b in m.blocks if isinstance(b, ToolCallBlock)} | {
        b.tool_call_id for m in messages for b in m.blocks if isinstance(b, ToolResultBlock)
    }
    seen: list[str] = [call_id for group in groups for call_id in group.tool_call_ids]
    assert sorted(seen) == sorted(all_ids)  # each id once, none missing
    for group in groups:
        assert list(group.tool_call_ids) == sorted(set(group.tool_call_ids))
    position = {m.id: i for i, m in enumerate(messages)}
    partition = {frozenset(position[mid] for mid in group.message_ids) for group in groups}
    assert partition == reference_partition(messages)
    for group in groups:
        assert [position[mid] for mid in group.message_ids] == sorted(
            position[mid] for mid in group.message_ids
        )
    assert [g.message_ids[0] for g in groups] == sorted(g.message_ids[0] for g in groups)


@SETTINGS
@given(histories())
def test_complete_means_one_call_and_some_result_for_every_id(messages):
    calls: dict[str, int] = {}
    results: dict[str, int] = {}
    for m in messages:
        for b in m.blocks:
            if isinstance(b, ToolCallBlock):
                calls[b.id] = calls.get(b.id, 0) + 1
            elif isinstance(b, ToolResultBlock):
                results[b.tool_call_id] = results.get(b.tool_call_id, 0) + 1
    for group in build_canonical_tool_atomic_groups(messages):
        expected = all(calls.get(i, 0) == 1 and results.get(i, 0) >= 1 for i in group.tool_call_ids)
        assert group.complete is expected


@SETTINGS
@given(histories())
def test_validation_flags_duplicates_and_orphans_and_trusts_nothing_else(messages):
    snapshot = snapshot_of(messages)
    issues = validate_runtime_history_snapshot(snapshot)
    call_counts: dict[str, int] = {}
    for m in messages:
        for b in m.blocks:
            if isinstance(b, ToolCallBlock):
                call_counts[b.id] = call_counts.get(b.id, 0) + 1
    answered = {b.tool_call_id for m in messages for b in m.blocks if isinstance(b, ToolResultBlock)}
    assert {i.tool_call_id for i in issues if i.code == "tool-call-identity-invalid"} == {
        call_id for call_id, n in call_counts.items() if n > 1
    }
    assert {i.tool_call_id for i in issues if i.code == "tool-result-orphaned"} == answered - set(call_counts)
    assert not [i for i in issues if i.code.startswith("tool-atomic") or i.code.startswith("history-")]


MUTATIONS = ["drop", "duplicate", "shrink", "flip", "unknown-call", "ghost-message"]
EXPECTED_CODE = {
    "drop": "tool-atomic-group-missing",
    "duplicate": "tool-atomic-call-overlap",
    "shrink": "tool-atomic-group-mismatch",
    "flip": "tool-atomic-group-mismatch",
    "unknown-call": "tool-atomic-call-unknown",
    "ghost-message": "tool-atomic-message-missing",
}


@SETTINGS
@given(histories(), st.sampled_from(MUTATIONS), st.data())
def test_each_planted_group_defect_is_flagged_with_its_code(messages, mutation, data):
    snapshot = snapshot_of(messages)
    groups = list(snapshot.tool_atomic_groups)
    if not groups:
        return
    index = data.draw(st.integers(min_value=0, max_value=len(groups) - 1))
    group = groups[index]
    if mutation == "drop":
        del groups[index]
    elif mutation == "duplicate":
        groups.append(group)
    elif mutation == "shrink":
        if len(group.message_ids) < 2:
            return
        groups[index] = msgspec.structs.replace(group, message_ids=group.message_ids[1:])
    elif mutation == "flip":
        groups[index] = msgspec.structs.replace(group, complete=not group.complete)
    elif mutation == "unknown-call":
        groups[index] = msgspec.structs.replace(group, tool_call_ids=(*group.tool_call_ids, "never-called"))
    else:
        groups.append(
            RuntimeToolAtomicGroup(id="g", message_ids=("s:nowhere",), tool_call_ids=("x",), complete=False)
        )
    tampered = msgspec.structs.replace(snapshot, tool_atomic_groups=tuple(groups))
    codes = {issue.code for issue in validate_runtime_history_snapshot(tampered)}
    assert EXPECTED_CODE[mutation] in codes


@SETTINGS
@given(histories())
def test_jsonl_round_trip_is_exact(messages):
    encoded = encode_canonical_messages_jsonl(messages)
    decoded = decode_canonical_messages_jsonl(encoded)
    assert decoded == tuple(messages)
    assert encode_canonical_messages_jsonl(decoded) == encoded
