"""Engine plans are as cache-stable as core's: between compactions a step extends the previous plan.

Sessions are replayed as a host appends them (new user turns, tool calls, results), with a real SQLite
derived store where one is named, so the task digest and the retrieved history are in play; the
workspace plans before every model call, as a host does.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from _long_session import pi_message, write_long_session

from ds4_context_core import ModelDescriptor
from ds4_context_core.planner import plan_context
from ds4_context_engine.commands import (
    ContextWorkspace,
    SettledPlan,
    TaskDigestReader,
    settle_cut_supplements,
)
from ds4_context_engine.commands import _overhead as overhead_module
from ds4_context_engine.commands import _workspace as workspace_module
from ds4_context_engine.commands._digest import DigestBuilder
from ds4_context_engine.pi import append_pi_entries

PI_SHELL_SESSION = Path(__file__).parents[3] / "benchmarks" / "fixtures" / "pi-shell-session.jsonl"
PI_MODEL = ModelDescriptor(provider="openai", id="replay", context_window=32_000, max_tokens=16_384)
MODEL = ModelDescriptor(provider="openai", id="gpt-4.1-mini", context_window=32_000, max_tokens=2_000)


def _turn(step, reads=6):
    """One user turn: a request that names an old fact (so history is retrieved), then ``reads`` read
    steps; each list is what a host appends before its next model call."""
    request = f"Turn {step}: does test_rounds_twice still fail after the change to p{step}.py?"
    appended = [[pi_message("user", request)]]
    for read in range(reads):
        call = f"again-{step}-{read}"
        body = "\n".join(f"def helper_{step}_{read}_{line}(): return {line}" for line in range(60))
        arguments = {"path": f"p{step}_{read}.py"}
        appended.append(
            [
                pi_message(
                    "assistant", [{"type": "toolCall", "id": call, "name": "read", "arguments": arguments}]
                ),
                pi_message(
                    "toolResult",
                    [{"type": "text", "text": body}],
                    toolCallId=call,
                    toolName="read",
                    isError=False,
                ),
            ]
        )
    return appended


def _compacts(plan):
    report = plan.manifest.compaction
    return report is not None and not report.dry_run


@pytest.fixture
def replayed(tmp_path, monkeypatch):
    """(plan, plan_context calls) at the first 72 model calls of the shipped Pi session with long shell
    turns, written line by line as Pi appends it and planned before every assistant message. At call 70
    a compaction's rebuilt retrieved history comes out much smaller than the one it was planned with."""
    lines = PI_SHELL_SESSION.read_bytes().splitlines(keepends=True)
    path = tmp_path / "session.jsonl"
    path.write_bytes(lines[0])
    calls = []
    real = workspace_module.plan_context

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(workspace_module, "plan_context", counted)
    steps = []
    store = tmp_path / "derived.sqlite3"
    with ContextWorkspace.open(path, store_path=store, model=PI_MODEL) as workspace, path.open("ab") as out:
        for line in lines[1:]:
            entry = json.loads(line)
            message = entry.get("message") if entry.get("type") == "message" else None
            if isinstance(message, dict) and message.get("role") == "assistant":
                workspace.refresh()
                before = len(calls)
                steps.append((workspace.plan(), len(calls) - before))
                if len(steps) == 72:
                    break
            out.write(line)
            out.flush()
    return steps


def test_a_step_that_compacts_nothing_keeps_the_whole_previous_plan(replayed):
    quiet = 0
    for (previous, _), (plan, _) in itertools.pairwise(replayed):
        assert plan.ok
        if _compacts(plan):
            continue
        quiet += 1
        # every message the previous request sent, in order, byte for byte: the digest and the
        # retrieved history in front included, at a new user turn as within one
        assert plan.messages[: len(previous.messages)] == previous.messages
    kinds = {item.kind for plan, _ in replayed for item in plan.items}
    assert "summary" in kinds  # the digest was planned, and rebuilt at compactions
    assert quiet > len(replayed) // 2
    assert sum(_compacts(plan) for plan, _ in replayed) > 1  # and rebuilt at compactions


def _supplement_tokens(plan):
    return sum(item.tokens for item in plan.items if item.reason == "supplement-priority")


def test_a_compaction_whose_rebuilt_supplements_shrink_keeps_its_cut(replayed):
    """Planned in the room the carried supplements took, the smaller ones rebuilt for a compaction's
    cut give that compaction, not a plan that fits at the old cut with new supplements in front (which
    the next quiet step would then not keep)."""
    shrunk = [
        plan
        for (previous, _), (plan, _) in itertools.pairwise(replayed)
        if _compacts(plan) and _supplement_tokens(plan) < _supplement_tokens(previous) - 1_000
    ]
    assert shrunk
    for plan in shrunk:
        assert plan.manifest.shared_prefix_messages < len(plan.messages)
        assert plan.state.dropped_messages > 0


def test_a_step_that_compacts_nothing_plans_once(replayed):
    quiet = [count for plan, count in replayed if not _compacts(plan)]
    assert quiet
    assert set(quiet) == {1}  # nothing rebuilt and nothing planned again


def test_the_digest_reads_each_cut_message_once_over_a_whole_session(tmp_path, monkeypatch):
    """Planned step by step as a host does, the digest reads what each compaction newly cut, never the
    whole history again: a message is read at most twice (once more when a planning pass tried a
    longer cut and came back), not once per step."""
    path = write_long_session(tmp_path / "s.jsonl")
    fed = []
    real = DigestBuilder.feed

    def feed(self, messages):
        batch = list(messages)
        fed.append(len(batch))
        return real(self, batch)

    monkeypatch.setattr(DigestBuilder, "feed", feed)
    with ContextWorkspace.open(path, no_store=True, model=MODEL) as workspace:
        cuts = set()
        for step in range(30):
            for entries in _turn(step):
                append_pi_entries(path, entries)
                workspace.refresh()
                cuts.add(workspace.plan().state.dropped_messages)
        final = workspace.plan().state.dropped_messages
    assert len(cuts) > 2  # it compacted more than once
    assert sum(fed) < 2 * final
    assert sum(1 for count in fed if count) <= 3 * len(cuts)  # read at compactions, not at every step


def test_a_host_planning_with_the_reader_extends_its_previous_plan(tmp_path):
    """The public pieces a host of its own plans with: carried supplements, one reader per session."""
    path = write_long_session(tmp_path / "s.jsonl")
    reader = TaskDigestReader()
    settled: SettledPlan | None = None
    with ContextWorkspace.open(path, no_store=True, model=MODEL) as workspace:
        plans = []
        for step in range(30):
            for entries in _turn(step):
                append_pi_entries(path, entries)
                workspace.refresh()
                messages = workspace.context.messages
                state = settled.plan.state if settled is not None else None

                def replan(extra, messages=messages, state=state):
                    return plan_context(
                        messages, model=MODEL, state=state, supplemental=extra, task_digest=False
                    )

                def digest_of(cut, messages=messages):
                    digest = reader.digest(messages, cut)
                    return [digest] if digest is not None else []

                carried = settled.extra if settled is not None else ()
                settled = settle_cut_supplements(
                    messages,
                    replan(carried),
                    digest_of,
                    replan,
                    planned_with=carried,
                    planned_for=settled.key if settled is not None else None,
                )
                plans.append(settled.plan)
        final = len(workspace.context.messages)
    assert reader.fed < 2 * final
    assert any(item.kind == "summary" for item in plans[-1].items)
    for previous, plan in itertools.pairwise(plans):
        if not _compacts(plan):
            assert plan.messages[: len(previous.messages)] == previous.messages


def _answered_turn(turn):
    usage = {"input": 900 + 40 * turn, "output": 60, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 0}
    answer = {
        "role": "assistant",
        "content": [{"type": "text", "text": f"Answer {turn}."}],
        "provider": "openai",
        "model": "gpt-recorded",
        "stopReason": "stop",
        "usage": usage,
        "timestamp": turn,
    }
    return [
        pi_message("user", f"Question {turn}: what changed in part {turn}?"),
        ("message", {"message": answer}),
    ]


def test_the_measured_overhead_reads_the_usage_appended_not_the_whole_session(tmp_path, monkeypatch):
    """Planned for another model than the session's calls were made with (a replay, a switched model),
    no recorded usage is the newest of the planned model's: a step still reads only the new ones."""
    path = tmp_path / "usage.jsonl"
    write_long_session(path, steps=4)
    for turn in range(40):
        append_pi_entries(path, _answered_turn(turn))
    read = []
    real = overhead_module.calibration_profile

    def profile(provider, model):
        read.append(1)
        return real(provider, model)

    monkeypatch.setattr(overhead_module, "calibration_profile", profile)
    with ContextWorkspace.open(path, no_store=True, model=MODEL) as workspace:
        workspace.plan()
        per_step = []
        for turn in range(40, 60):
            append_pi_entries(path, _answered_turn(turn))
            workspace.refresh()
            before = len(read)
            workspace.plan()
            per_step.append(len(read) - before)
    # the planned model's profile, and the one usage each step appended: never the 40 and more before
    assert max(per_step) <= 2
