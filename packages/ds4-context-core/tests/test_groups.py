"""Tool atomic groups on small hand-built histories, with expected values worked out by hand."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Callable

import msgspec

from ds4_context_core import (
    CanonicalMessage,
    ImageBlock,
    Provenance,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from ds4_context_core._history._groups import CheckedGroups, group_and_check
from ds4_context_core._planner._index import (
    HistoryIndex,
    index_tool_units,
    tool_atomic_groups,
    tool_ids_regular,
)
from ds4_context_core.history import build_canonical_tool_atomic_groups, tool_atomic_group_id


def msg(message_id: str, *blocks) -> CanonicalMessage:
    return CanonicalMessage(
        id=message_id,
        source_entry_id=message_id,
        role="assistant",
        blocks=blocks,
        provenance=Provenance(source="pi-session", session_id="s", entry_id=message_id),
    )


def call(call_id: str) -> ToolCallBlock:
    return ToolCallBlock(id=call_id, name="t", arguments={})


def result(call_id: str) -> ToolResultBlock:
    return ToolResultBlock(tool_call_id=call_id, tool_name="t", content="")


def test_group_id_is_prefix_plus_sha256_of_nul_joined_ids():
    expected = "runtime-tool-group:" + hashlib.sha256(b"s:1\x00s:2").hexdigest()[:16]
    assert tool_atomic_group_id(["s:1", "s:2"]) == expected
    (group,) = build_canonical_tool_atomic_groups([msg("s:1", call("c")), msg("s:2", result("c"))])
    assert group.id == expected


def test_no_tool_blocks_no_groups():
    assert build_canonical_tool_atomic_groups([msg("a", TextBlock(text="x"))]) == ()
    assert build_canonical_tool_atomic_groups([]) == ()


def _checked_facts(checked: CheckedGroups) -> tuple[object, ...]:
    return (checked.groups, checked.call_ids, checked.ids_regular)


def _index_facts(index: HistoryIndex) -> tuple[object, ...]:
    return (tool_atomic_groups(index), list(index.callers), tool_ids_regular(index))


def _outcome(compute: Callable[[], tuple[object, ...]]) -> tuple[object, ...]:
    # the compiled index refuses an odd field with TypeError where the interpreted one reads on: the
    # shortcut must then fail the same way, not answer
    try:
        return ("value", compute())
    except TypeError:
        return ("TypeError",)


def test_a_history_without_tool_blocks_skips_the_index_and_says_what_the_index_says():
    # the shortcut of group_and_check must give what the tool unit index gives, and leave every odd
    # history (a non-string id, a list of blocks, a dict block, a tool block anywhere) to the index
    plain = [msg("a", TextBlock(text="x")), msg("b", ThinkingBlock(thinking="t"), ImageBlock(data="d"))]
    late_call = [*plain, msg("c", TextBlock(text="y"), call("c1"))]
    late_result = [*plain, msg("d", result("c9"))]
    odd = msgspec.structs.replace(plain[0], id=5)
    for history in (
        plain,
        late_call,
        late_result,
        [odd, *plain],
        [msgspec.structs.replace(plain[0], blocks=[])],
    ):
        assert _outcome(lambda h=history: _checked_facts(group_and_check(h))) == _outcome(
            lambda h=history: _index_facts(index_tool_units(h))
        )
    assert group_and_check(late_call).groups != ()
    assert group_and_check(late_result).groups != ()


def test_groups_are_sorted_by_first_message_id_not_by_position():
    history = [
        msg("s:b", call("c1")),
        msg("s:a", call("c2")),
        msg("s:c", result("c1")),
        msg("s:d", result("c2")),
    ]
    first, second = build_canonical_tool_atomic_groups(history)
    assert first.message_ids == ("s:a", "s:d")
    assert second.message_ids == ("s:b", "s:c")


def test_result_before_call_and_chained_messages_join_one_group_in_history_order():
    history = [
        msg("m1", result("c1")),  # arrives before its call
        msg("m2", call("c1")),
        msg("m3", result("c1"), call("c2")),  # answers c1 and calls c2: chains both into one group
        msg("m4", TextBlock(text="between")),
        msg("m5", result("c2")),
    ]
    (group,) = build_canonical_tool_atomic_groups(history)
    assert group.message_ids == ("m1", "m2", "m3", "m5")
    assert group.tool_call_ids == ("c1", "c2")
    assert group.complete is True


def test_orphans_share_one_incomplete_group_per_id():
    history = [msg("m1", result("ghost")), msg("m2", TextBlock(text="x")), msg("m3", result("ghost"))]
    (group,) = build_canonical_tool_atomic_groups(history)
    assert group.message_ids == ("m1", "m3")
    assert group.tool_call_ids == ("ghost",)
    assert group.complete is False


def test_duplicate_call_blocks_make_the_group_incomplete():
    (group,) = build_canonical_tool_atomic_groups([msg("m1", call("c"), call("c")), msg("m2", result("c"))])
    assert group.complete is False
    assert group.tool_call_ids == ("c",)


def test_messages_with_duplicate_ids_are_grouped_by_position():
    history = [msg("dup", call("c1")), msg("dup", result("c1")), msg("x", call("c2"))]
    first, second = build_canonical_tool_atomic_groups(history)
    assert first.message_ids == ("dup", "dup")
    assert second.message_ids == ("x",)
    assert (first.complete, second.complete) == (True, False)


_CHILD = """
import sys
import msgspec
from ds4_context_core import CanonicalMessage, Provenance, ToolCallBlock, ToolResultBlock
from ds4_context_core.history import build_runtime_history_snapshot, validate_runtime_history_snapshot

def msg(i, *blocks):
    provenance = Provenance(source="pi-session", session_id="s", entry_id=str(i))
    entry = str(i)
    return CanonicalMessage(
        id="s:" + entry, source_entry_id=entry, role="tool", blocks=blocks, provenance=provenance
    )

calls = [f"call-{n}" for n in range(40)]
history = []
for i in range(200):
    a, b = calls[(i * 7) % 40], calls[(i * 11 + 3) % 40]
    if i % 3 == 0:
        first = ToolCallBlock(id=a, name="t", arguments={"i": i})
        history.append(msg(i, first, ToolCallBlock(id=b, name="t", arguments={})))
    else:
        answered = a if i % 2 else "ghost-" + b
        history.append(msg(i, ToolResultBlock(tool_call_id=answered, tool_name="t", content="")))
snapshot = build_runtime_history_snapshot(
    runtime_id="r", session_id="s", revision="v", project_root="/p", messages=history
)
issues = validate_runtime_history_snapshot(snapshot)
sys.stdout.buffer.write(msgspec.json.encode([snapshot.tool_atomic_groups, issues]))
"""


def test_groups_and_issues_are_identical_across_processes_and_hash_seeds():
    outputs = set()
    for seed in ("0", "1", "4242"):
        child = subprocess.run(
            [sys.executable, "-c", _CHILD],
            capture_output=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
            check=True,
            timeout=120,
        )
        outputs.add(child.stdout)
    assert len(outputs) == 1
    (output,) = outputs
    assert b"tool-call-identity-invalid" in output
    assert b"tool-result-orphaned" in output
