"""Receipts for every tool kind, the task digest, and interrupted calls, through the public API."""

from __future__ import annotations

import ds4_context_core as core
from ds4_context_core.planner import ContextPlanner, plan_context
from ds4_context_core.pruning import (
    RECEIPT_HEADER,
    TASK_DIGEST_HEADER,
    ReceiptCall,
    TaskDigestBuilder,
    build_receipt_text,
    build_task_digest,
)

SESSION = "s"


def _message(entry, role, *blocks, original_role=None):
    return core.CanonicalMessage(
        id=f"{SESSION}:{entry}",
        source_entry_id=entry,
        role=role,
        blocks=blocks,
        provenance=core.Provenance(
            source="pi-session",
            session_id=SESSION,
            entry_id=entry,
            runtime_id="r",
            original_role=original_role,
        ),
    )


def user(entry, text):
    return _message(entry, "user", core.TextBlock(text=text))


def calls(entry, *specs, note=""):
    blocks = [core.TextBlock(text=note)] if note else []
    blocks += [
        core.ToolCallBlock(id=call_id, name=name, arguments=arguments) for call_id, name, arguments in specs
    ]
    return _message(entry, "assistant", *blocks)


def result(entry, call_id, content, name="read", error=False):
    return _message(
        entry,
        "tool",
        core.ToolResultBlock(tool_call_id=call_id, tool_name=name, content=content, is_error=error),
    )


def _receipt(*calls_, restore_tool=None):
    return build_receipt_text(
        receipt_id="ds4-receipt:abc",
        first_message_id="s:a",
        last_message_id="s:b",
        message_count=2 * len(calls_),
        calls=list(calls_),
        assistant_notes="",
        note_chars=100,
        restore_tool=restore_tool,
    )


def test_a_receipt_line_per_tool_kind_carries_what_identifies_the_call_and_its_outcome():
    log = (
        "collected 3 items\ntests/test_a.py F\nE   KeyError: 'x'\n"
        "FAILED tests/test_a.py::t - KeyError\n\nCommand exited with code 1"
    )
    text = _receipt(
        ReceiptCall(
            tool_name="read",
            arguments={"path": "src/a.py", "offset": 200, "limit": 50},
            output_chars=900,
            is_error=False,
            result="a\nb\nc",
        ),
        ReceiptCall(
            tool_name="Read",
            arguments={"file_path": "src/a.py"},
            output_chars=4000,
            is_error=False,
            result="x",
        ),
        ReceiptCall(
            tool_name="edit",
            arguments={"path": "src/a.py", "oldText": "a\nb", "newText": "a\nb\nc\nd"},
            output_chars=20,
            is_error=False,
        ),
        ReceiptCall(
            tool_name="str_replace_editor",
            arguments={"command": "create", "path": "t.py", "file_text": "1\n2\n3"},
            output_chars=5,
            is_error=False,
        ),
        ReceiptCall(
            tool_name="bash",
            arguments={"command": "pytest -q tests/test_a.py"},
            output_chars=len(log),
            is_error=True,
            result=log,
        ),
        ReceiptCall(
            tool_name="Bash", arguments={"command": "ls -la"}, output_chars=30, is_error=False, result="a\nb"
        ),
        ReceiptCall(
            tool_name="grep",
            arguments={"pattern": "def plan", "path": "src"},
            output_chars=40,
            is_error=False,
            result="src/a.py:1\nsrc/b.py:9\n",
        ),
        ReceiptCall(
            tool_name="mcp_fetch_issue",
            arguments={"id": "ISSUE-7", "body": "PAYLOAD"},
            output_chars=70,
            is_error=False,
        ),
        ReceiptCall(
            tool_name="bash",
            arguments={"command": "make all"},
            output_chars=0,
            is_error=False,
            interrupted=True,
        ),
    )
    lines = text.splitlines()
    assert lines[0].startswith(RECEIPT_HEADER)
    assert "- read src/a.py offset=200 limit=50 -> 900 chars, 3 lines" in lines
    assert "- read src/a.py -> 4000 chars, 1 lines" in lines  # two ranges of one file look different
    assert "- edited src/a.py: replaced 2 line(s) with 4 -> done" in lines
    assert "- wrote t.py: 3 lines, 5 chars -> done" in lines
    assert any(
        line.startswith("- ran `pytest -q tests/test_a.py` -> exit 1") and "KeyError" in line
        for line in lines
    )
    assert "- ran `ls -la` -> exit 0, 30 chars of output" in lines
    assert "- grep `def plan` in src -> 2 hit line(s)" in lines
    assert "- mcp_fetch_issue ISSUE-7 -> 70 chars" in lines
    assert "- ran `make all` -> interrupted: no result came back" in lines
    assert "PAYLOAD" not in text
    assert "do not repeat them" in text  # mutating calls are never offered for re-running
    assert "re-run" not in text.lower()
    assert "ds4-receipt:abc" not in text
    assert 'call ds4_restore with id "ds4-receipt:abc"' in _receipt(
        *[ReceiptCall(tool_name="read", arguments={}, output_chars=1, is_error=False)],
        restore_tool="ds4_restore",
    )


def test_the_digest_skips_host_commands_and_keeps_requests_files_commands_and_open_errors():
    history = [
        user("u0", "/mode plan"),
        user("u1", "Fix the crash in the store when the file is empty."),
        calls("a1", ("c1", "bash", {"command": "pytest -q tests/test_store.py"})),
        result("r1", "c1", "E  ValueError: empty\n\nCommand exited with code 1", name="bash", error=True),
        calls("a2", ("c2", "edit", {"path": "src/store.py", "oldText": "a", "newText": "b"})),
        result("r2", "c2", "Successfully replaced text in src/store.py.", name="edit"),
        calls("a3", ("c3", "bash", {"command": "ruff check src"})),
        result("r3", "c3", "src/x.py:1:1: error F401\n\nCommand exited with code 1", name="bash", error=True),
        calls("a4", ("c4", "bash", {"command": "pytest -q tests/test_store.py"})),
        result("r4", "c4", "3 passed", name="bash"),
        user("u2", "/model claude-sonnet-4-5"),
        user("u3", "Also keep the old file format readable."),
    ]
    text = build_task_digest(history)
    assert text is not None
    assert text.startswith(TASK_DIGEST_HEADER)
    assert "Original request: Fix the crash in the store when the file is empty." in text
    assert "/mode" not in text
    assert "/model" not in text
    assert "- Also keep the old file format readable." in text
    assert "- src/store.py" in text
    # one line per command: how often it ran and its last outcome
    assert "- pytest -q tests/test_store.py (x2): exit 0" in text
    assert text.count("pytest -q tests/test_store.py") == 2  # once among the commands, once an error
    assert "- ruff check src: exit 1" in text
    errors = text.split("Errors, newest first")[1].split("Files changed")[0]
    assert "- ruff check src: src/x.py:1:1: error F401\n" in errors  # still open
    # the failed test run went through since: said so, not dropped
    assert "- pytest -q tests/test_store.py: E ValueError: empty (passed since)" in errors


def test_the_digest_reads_a_pi_compaction_summary():
    summary = (
        "Summary of the earlier part of this session (compacted by the host):\n\n"
        "## Goal\nPort the CLI to typer.\n## Progress\n- done\n"
        "<read-files>\nsrc/cli.py\n</read-files>\n"
        "<modified-files>\nsrc/cli.py\nsrc/main.py\n</modified-files>"
    )
    history = [
        _message("c0", "user", core.TextBlock(text=summary), original_role="compactionSummary"),
        user("u1", "go on"),
    ]
    text = build_task_digest(history)
    assert "Port the CLI to typer." in text
    changed = text.split("Files changed")[1]
    assert "- src/cli.py" in changed
    assert "- src/main.py" in changed


def test_a_digest_of_ten_thousand_edits_is_bounded_and_drops_whole_entries_with_a_count():
    paths = [f"src/pkg/module_{number:05d}/file.py" for number in range(10_000)]
    history = [user("u", "rename everything")]
    for number, path in enumerate(paths):
        history.append(
            calls(f"a{number}", (f"c{number}", "edit", {"path": path, "oldText": "a", "newText": "b"}))
        )
        history.append(result(f"r{number}", f"c{number}", "ok", name="edit"))
    builder = TaskDigestBuilder()
    builder.feed(history)
    assert len(builder.changed.entries) <= 2_000  # what is kept while feeding is capped too
    text = builder.render(6_000)
    assert len(text) <= 6_000
    listed = [line[2:] for line in text.splitlines() if line.startswith("- ")]
    assert listed
    assert all(path in paths for path in listed)  # never a path cut in the middle
    assert listed[0] == paths[-1]  # the newest first
    assert f"({10_000 - len(listed)} older not shown)" in text


def _long_history(turns):
    history = []
    for turn in range(turns):
        history.append(user(f"u{turn}", f"step {turn}: change module {turn}"))
        history.append(calls(f"a{turn}", (f"c{turn}", "bash", {"command": f"pytest tests/test_{turn}.py"})))
        history.append(result(f"r{turn}", f"c{turn}", "ok\n" * 400, name="bash"))
        history.append(
            calls(
                f"e{turn}", (f"d{turn}", "edit", {"path": f"src/m{turn}.py", "oldText": "a", "newText": "b"})
            )
        )
        history.append(result(f"s{turn}", f"d{turn}", "done", name="edit"))
    return history


def test_the_planner_puts_the_digest_after_the_fixed_head_and_keeps_it_byte_identical_between_compactions():
    history = _long_history(120)
    model = core.ModelDescriptor(provider="p", id="m", context_window=16_000, max_tokens=2_000)
    planner = ContextPlanner(config={"planner": {"task_digest": True}})
    previous = None
    stable = 0
    for end in range(5, len(history) + 1, 5):
        plan = planner.plan(history[:end], model=model)
        assert plan.ok
        assert plan.budget.total_tokens <= plan.budget.hard_limit
        digests = [m for m in plan.messages if m.id == "ds4-supplement:ds4-core-task-digest"]
        if plan.state.dropped_messages:
            assert digests
            # only the fixed head (the oldest history kept, byte for byte) comes before the digest
            at = plan.messages.index(digests[0])
            assert all(item.reason == "fixed-head" for item in plan.items[:at])
            text = digests[0].blocks[0].text
            # every file changed before the cut is named in the digest or still in the plan
            sent = {m.id for m in plan.messages}
            for turn in range(end // 5):
                if f"s:e{turn}" not in sent:
                    assert f"src/m{turn}.py" in text
            if previous is not None and plan.manifest.compaction is None:
                assert digests[0] == previous
                stable += 1
            previous = digests[0]
    assert stable > 0


def test_an_interrupted_call_keeps_the_assistant_text_and_is_named_interrupted():
    history = [
        user("u1", "run the suite"),
        calls("a1", ("c1", "bash", {"command": "pytest -q"}), note="Running the whole suite."),
        user("u2", "stop, only the unit tests"),
    ]
    plan = plan_context(history, model=core.ModelDescriptor(provider="p", id="m", context_window=32_000))
    assert plan.ok
    sent = next(m for m in plan.messages if m.id == "s:a1")
    texts = [b.text for b in sent.blocks if isinstance(b, core.TextBlock)]
    assert texts[0] == "Running the whole suite."
    assert "pytest -q" in texts[1]
    assert "interrupted" in texts[1]
    assert not sent.tool_call_ids  # no call without a result reaches the provider
    item = plan.items[plan.messages.index(sent)]
    assert item.kind == "interrupted-tool-call"


def test_a_long_command_is_named_by_its_head_and_a_traceback_by_its_exception():
    script = "python -c " + "'import x; " * 40
    error = (
        '=== FAILURES ===\nTraceback (most recent call last):\n  File "x.py", line 3\n'
        "KeyError: 'budget-17'\n\nCommand exited with code 1"
    )
    history = [
        user("u0", "run it"),
        calls("a1", ("c1", "bash", {"command": script})),
        result("r1", "c1", error, name="bash", error=True),
    ]
    text = build_task_digest(history)
    lines = [line for line in text.splitlines() if line.startswith("- python -c")]
    assert lines
    assert all(len(line) < 160 for line in lines)  # a 440-character script is named by its head
    assert " ".join(script.split())[:90] in lines[0]
    assert "KeyError: 'budget-17'" in text  # the exception, not the bare traceback header
    assert "(most recent call last)" not in text


def _growing(turns):
    """A coding session growing turn by turn: each turn a request, a test run and an edit."""
    history = []
    for turn in range(turns):
        history.append(user(f"u{turn}", f"step {turn}: change module {turn}"))
        history.append(calls(f"a{turn}", (f"c{turn}", "bash", {"command": f"pytest tests/test_{turn}.py"})))
        history.append(result(f"r{turn}", f"c{turn}", f"ok {turn}\n" * 150, name="bash"))
    return history


def _replay(config, history, model):
    planner = ContextPlanner(config=config)
    compactions = 0
    appended_steps = 0
    previous = None
    for end in range(3, len(history) + 1, 3):
        plan = planner.plan(history[:end], model=model)
        assert plan.ok
        assert plan.budget.total_tokens <= plan.budget.hard_limit
        if plan.manifest.compaction is not None:
            compactions += 1
        elif previous is not None and plan.state.dropped_messages:
            # between compactions a plan extends the previous one byte for byte
            assert plan.messages[: len(previous.messages)] == previous.messages
            appended_steps += 1
        previous = plan
    return compactions, appended_steps


def test_compactions_cut_to_the_low_water_mark_so_the_next_steps_append():
    history = _growing(300)
    model = core.ModelDescriptor(provider="p", id="m", context_window=16_000, max_tokens=2_000)
    deep, deep_appended = _replay(None, history, model)
    shallow, _ = _replay({"planner": {"compaction_low_water_ratio": 1.0}}, history, model)
    assert deep > 0
    # cutting to the low-water mark (the default) moves the cut far less often than cutting just below
    # the soft limit, and the steps in between append to the cached prefix
    assert deep * 3 < shallow * 2
    assert deep_appended >= 4 * deep


def test_a_request_the_cut_passed_stays_in_front_at_the_next_turn_until_the_cut_moves():
    # one long turn whose results push its own request behind the cut, then a new short turn
    history = [user("u0", "refactor the store"), user("u1", "go through every module")]
    for step in range(60):
        history.append(calls(f"a{step}", (f"c{step}", "read", {"path": f"src/m{step}.py"})))
        history.append(result(f"r{step}", f"c{step}", f"line {step}\n" * 120))
    model = core.ModelDescriptor(provider="p", id="m", context_window=16_000, max_tokens=2_000)
    planner = ContextPlanner()
    first = planner.plan(history, model=model)
    assert first.ok
    request = next(m for m in history if m.id == "s:u1")
    assert request in first.messages  # the turn's request, mandatory, in front of the window
    assert first.state.dropped_messages > history.index(request)
    second = planner.plan([*history, user("u2", "thanks, now the tests")], model=model)
    assert second.ok
    assert second.manifest.compaction is None
    # the new turn extends the previous plan: the old request was not dropped from the front
    assert second.manifest.shared_prefix_messages == len(first.messages)
    assert second.messages[: len(first.messages)] == first.messages


def test_a_host_with_its_own_digest_turns_cores_off_per_call_with_or_without_a_config():
    history = _long_history(120)
    model = core.ModelDescriptor(provider="p", id="m", context_window=16_000, max_tokens=2_000)
    digest_id = "ds4-supplement:ds4-core-task-digest"
    for config in (None, {"budget": {"target_fill_ratio": 0.7}}):
        default = plan_context(history, model=model, config=config)
        assert default.state.dropped_messages
        assert any(m.id == digest_id for m in default.messages)  # on by default
        without = plan_context(history, model=model, config=config, task_digest=False)
        assert without.ok
        assert not any(m.id == digest_id for m in without.messages)
    # and the other way: a configuration that turned it off, turned on for one call
    off = {"planner": {"task_digest": False}}
    assert not any(m.id == digest_id for m in plan_context(history, model=model, config=off).messages)
    assert any(
        m.id == digest_id for m in plan_context(history, model=model, config=off, task_digest=True).messages
    )
