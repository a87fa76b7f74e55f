"""The task replay's shared prefix ceiling: what each step appends bounds the shared prefix of any plan."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

from ds4_context_core import CanonicalMessage, ModelDescriptor, Provenance, TextBlock
from ds4_context_core.planner import fast_chars_v1

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "fixtures"))
# benchmarks/ is not a package: loaded by name, as test_replay_plot does
task_replay: Any = importlib.import_module("task_replay")
read_session: Any = importlib.import_module("make_coding_session").read_session

FIXTURE = ROOT / "benchmarks" / "fixtures" / "coding-session.jsonl"


def _user(entry: str, text: str) -> CanonicalMessage:
    return CanonicalMessage(
        id=f"s:{entry}",
        source_entry_id=entry,
        role="user",
        blocks=(TextBlock(text=text),),
        provenance=Provenance(source="pi-session", session_id="s", entry_id=entry, runtime_id="r"),
    )


def test_the_appended_messages_are_those_after_the_shared_prefix_of_the_two_histories() -> None:
    a, b, c, d = (_user(name, name * 400) for name in "abcd")
    assert task_replay.appended_since(None, [a, b]) == [a, b]
    assert task_replay.appended_since([a, b], [a, b, c, d]) == [c, d]
    assert task_replay.appended_since([a, b, c], [a, d, c]) == [d, c]  # the host rewrote its history
    assert task_replay.appended_since([a, b], [a, b]) == []
    room = 4 * fast_chars_v1(c)
    assert task_replay.ceiling_of([c], room) == 1 - fast_chars_v1(c) / room
    assert task_replay.ceiling_of([c, d, c, d, c], room) == 0.0
    assert task_replay.ceiling_of([], room) == 1.0
    assert task_replay.ceiling_of([c], 0) == 0.0


def test_no_plan_of_the_coding_fixture_that_sends_the_new_messages_whole_passes_its_ceiling() -> None:
    steps = task_replay.canonical_steps(read_session(FIXTURE))[:150]
    model = ModelDescriptor(provider="replay", id="replay", context_window=32_000)
    plan_of: Any = task_replay._core_planner(model, 4000)
    previous: list[CanonicalMessage] | None = None
    checked = bound = 0
    for step in steps:
        plan = plan_of(step.history)
        assert plan.ok
        appended = task_replay.appended_since(previous, step.history)
        first, previous = previous is None, step.history
        sent = {id(message) for message in plan.messages}
        if first or not all(id(message) in sent for message in appended):
            continue  # the first plan, or one that trimmed a new result: no bound holds
        history_tokens = plan.budget.total_tokens - 4000
        shared = plan.manifest.shared_prefix_tokens / history_tokens
        ceiling = task_replay.ceiling_of(appended, plan.budget.hard_limit - 4000)
        assert shared <= ceiling + 1e-9
        checked += 1
        bound += ceiling < 0.9
    assert checked > 100
    assert bound > 0  # the bound does bind: some steps append a tenth of the room or more
