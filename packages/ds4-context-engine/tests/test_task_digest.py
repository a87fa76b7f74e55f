"""The task digest: a cut session keeps its original request, instructions, files and tools in the plan."""

from __future__ import annotations

import itertools

import msgspec
import pytest
from _long_session import FIRST_REQUEST, pi_message, write_long_session

from ds4_context_core import ModelDescriptor
from ds4_context_core.planner import plan_context
from ds4_context_engine.commands import ContextWorkspace, context_restore, run_context_command_text
from ds4_context_engine.commands._digest import (
    TASK_DIGEST_HEADER,
    TASK_DIGEST_ID,
    TASK_DIGEST_MAX_CHARS,
    cut_messages,
    task_digest,
)
from ds4_context_engine.pi import append_pi_entries

MODEL = ModelDescriptor(provider="openai", id="gpt-4.1-mini", context_window=32_000, max_tokens=2_000)
EDIT = pi_message(
    "assistant",
    [
        {
            "type": "toolCall",
            "id": "call-edit",
            "name": "Edit",
            "arguments": {"file_path": "src/budget.py", "old": "round(round(x))", "new": "round(x)"},
        }
    ],
)
EDITED = pi_message(
    "toolResult", [{"type": "text", "text": "ok"}], toolCallId="call-edit", toolName="Edit", isError=False
)
INSTRUCTION = pi_message("user", "Keep the public API of budget.py unchanged while you fix it.")


@pytest.fixture
def session_path(tmp_path):
    return write_long_session(tmp_path / "s.jsonl", early=[INSTRUCTION, EDIT, EDITED])


def _digest_of(plan):
    items = [(item, message) for item, message in zip(plan.items, plan.messages, strict=True)]
    # the engine's digest (core's own task digest, on by default, is another summary item)
    engine_id = "ds4-supplement:" + TASK_DIGEST_ID
    found = [(item, message) for item, message in items if item.kind == "summary" and message.id == engine_id]
    return found[0] if found else (None, None)


def test_a_cut_plan_starts_with_the_task_state_it_cut(session_path):
    with ContextWorkspace.open(session_path, no_store=True, model=MODEL) as workspace:
        plan = workspace.plan()
        messages = workspace.context.messages
    item, message = _digest_of(plan)
    assert item is not None
    assert plan.items[0] is item  # summaries go in front of the history
    text = message.blocks[0].text
    cut = cut_messages(messages, plan)
    # what does not move at a compaction first, the count that does last
    assert text.startswith(f"{TASK_DIGEST_HEADER}\nOriginal request: {FIRST_REQUEST}\nFirst instructions:\n")
    assert text.endswith(f"\n(from the {len(cut)} earlier messages this context leaves out)")
    assert f"Original request: {FIRST_REQUEST}" in text
    assert "- Keep the public API of budget.py unchanged while you fix it." in text
    assert "Files changed: src/budget.py" in text
    assert "Files read: p0.py, p1.py" in text
    assert "Tool calls: Edit 1, bash 1, read " in text
    first_user = next(m for m in messages if m.role == "user")
    assert first_user.id in item.source_ids
    assert plan.manifest.planned_tokens <= plan.budget.hard_limit


def test_the_digest_is_cache_stable_across_turns(session_path):
    with ContextWorkspace.open(session_path, no_store=True, model=MODEL) as workspace:
        first = workspace.plan()
        for turn in range(3):
            append_pi_entries(
                session_path,
                [
                    pi_message("assistant", [{"type": "text", "text": f"Done with turn {turn}."}]),
                    pi_message("user", f"Next, turn {turn + 1}: one more small change."),
                ],
            )
            workspace.refresh()
            later = workspace.plan()
            assert _digest_of(later)[1] == _digest_of(first)[1]
            assert later.manifest.shared_prefix_tokens > 0.8 * first.manifest.planned_tokens
            first = later


def test_no_cut_or_switched_off_means_no_digest(tmp_path, session_path):
    short = write_long_session(tmp_path / "short.jsonl", steps=2)
    with ContextWorkspace.open(short, no_store=True, model=MODEL) as workspace:
        assert _digest_of(workspace.plan()) == (None, None)
    with ContextWorkspace.open(session_path, no_store=True, model=MODEL, task_digest=False) as workspace:
        assert _digest_of(workspace.plan()) == (None, None)


def test_private_and_marked_requests_stay_out_of_the_digest(tmp_path):
    marked = pi_message("user", "[ds4:sensitive]the client is Initech[/ds4:sensitive], fix their build")
    path = write_long_session(tmp_path / "private.jsonl", first_request="Fix the build.", early=[marked])
    with ContextWorkspace.open(path, no_store=True, model=MODEL) as workspace:
        plan = workspace.plan()
        messages = list(workspace.context.messages)
    text = _digest_of(plan)[1].blocks[0].text
    assert "Initech" not in text
    first_user = next(m for m in messages if m.role == "user")
    flagged = msgspec.structs.replace(
        first_user, flags=msgspec.structs.replace(first_user.flags, local_only=True)
    )
    hidden = [flagged if m is first_user else m for m in messages]
    digest = task_digest(hidden, plan_context(hidden, model=MODEL))
    assert digest is not None
    assert "Fix the build." not in digest.text
    assert first_user.id not in digest.source_ids


def test_a_huge_cut_is_summarised_within_the_size_limit(tmp_path):
    chatter = [pi_message("user", f"instruction {n}: " + "please be careful " * 40) for n in range(60)]
    path = write_long_session(tmp_path / "big.jsonl", early=chatter)
    with ContextWorkspace.open(path, no_store=True, model=MODEL) as workspace:
        plan = workspace.plan()
    text = _digest_of(plan)[1].blocks[0].text
    assert len(text) <= TASK_DIGEST_MAX_CHARS
    assert "before them not shown):" in text  # the instructions left out are counted
    assert "instruction 0:" in text  # the earliest instructions (constraints) are kept
    assert "instruction 10:" not in text
    assert f"Now step {_last_cut_step(plan)}:" in text  # and so are the latest cut ones


def _last_cut_step(plan):
    """The step number of the newest user message the plan cut (the first kept one minus one)."""
    kept = [message for message in plan.messages if message.role == "user"]
    steps = [
        int(m.blocks[0].text.split()[2].rstrip(":")) for m in kept if m.blocks[0].text.startswith("Now step ")
    ]
    return min(steps) - 1


def test_restore_shows_the_requests_a_digest_quotes(session_path):
    with ContextWorkspace.open(session_path, no_store=True, model=MODEL) as workspace:
        plan = workspace.plan()
        item, _ = _digest_of(plan)
        restored = context_restore(workspace, item.message_id)
    assert [message.message_id for message in restored.messages] == list(item.source_ids)
    assert restored.messages[0].text == FIRST_REQUEST
    assert all(message.role == "user" for message in restored.messages)


def _shell_call(call_id, command):
    return pi_message(
        "assistant", [{"type": "toolCall", "id": call_id, "name": "bash", "arguments": {"command": command}}]
    )


def _shell_result(call_id, text, *, failed):
    return pi_message(
        "toolResult", [{"type": "text", "text": text}], toolCallId=call_id, toolName="bash", isError=failed
    )


def test_every_call_identity_is_kept_once_with_its_count_and_outcome(tmp_path):
    early = [pi_message("user", "/mode plan")]
    for n in range(3):  # the same command three times, the last one failing
        early.append(_shell_call(f"lint-{n}", "ruff check src/budget.py && mypy src/budget.py"))
        early.append(
            _shell_result(f"lint-{n}", "ok" if n < 2 else "[exit code 2]\nerror: bad", failed=n == 2)
        )
    early.append(_shell_call("grep-1", "true"))
    early.append(_shell_result("grep-1", "", failed=False))
    path = write_long_session(tmp_path / "calls.jsonl", early=early, first_request="/model gpt-5")
    with ContextWorkspace.open(path, no_store=True, model=MODEL) as workspace:
        plan = workspace.plan()
    text = _digest_of(plan)[1].blocks[0].text
    # a slash command or mode switch is no request: the first real one is the original request
    assert f"Original request: {FIRST_REQUEST}" not in text
    assert "Original request: Now step 0: tidy the logging module part 0." in text
    assert "/mode plan" not in text
    assert (
        text.count("ruff check src/budget.py && mypy src/budget.py") == 2
    )  # once as a call, once as an error
    assert "ruff check src/budget.py && mypy src/budget.py (x3, exit 2)" in text
    assert "bash calls: pytest -x (error) | " in text  # oldest first, so later compactions append
    assert "; bash ruff check src/budget.py && mypy src/budget.py: error: bad\n" in text  # open errors


def test_a_digest_of_ten_thousand_edits_drops_whole_entries_with_a_count(tmp_path):
    edits = []
    for n in range(10_000):
        call = {"type": "toolCall", "id": f"e{n}", "name": "Edit", "arguments": {"file_path": f"src/m{n}.py"}}
        edits.append(pi_message("assistant", [call]))
        edits.append(
            pi_message("toolResult", [{"type": "text", "text": "ok"}], toolCallId=f"e{n}", toolName="Edit")
        )
    path = write_long_session(tmp_path / "edits.jsonl", early=edits, steps=40)
    with ContextWorkspace.open(path, no_store=True, model=MODEL) as workspace:
        plan = workspace.plan()
    _item, message = _digest_of(plan)
    text = message.blocks[0].text
    assert plan.manifest.planned_tokens <= plan.budget.hard_limit
    line = next(line for line in text.splitlines() if line.startswith("Files changed ("))
    shown = line.split(": ", 1)[1].split(", ")
    assert all(entry.startswith("src/m") and entry.endswith(".py (edit)") for entry in shown)  # none cut
    assert f"({10_000 - len(shown)} older not shown)" in line
    assert shown[-1] == "src/m9999.py (edit)"  # the newest are kept


def test_a_digest_built_step_by_step_equals_one_built_at_once(session_path):
    with ContextWorkspace.open(session_path, no_store=True, model=MODEL) as workspace:
        cuts = set()
        for step in range(120):
            note = f"Later note {step}: " + "keep going with the logging parts " * 20
            append_pi_entries(session_path, [pi_message("user", note)])
            workspace.refresh()
            plan = workspace.plan()
            cuts.add(len(cut_messages(workspace.context.messages, plan)))
        assert len(cuts) > 2  # the cut moved: the kept reader was fed the newly cut messages only
        item = next(item for item in plan.items if item.kind == "summary")
        fresh = task_digest(workspace.context.messages, plan)
    assert fresh is not None
    assert plan.messages[plan.items.index(item)].blocks[0].text == fresh.text


def test_a_pin_given_after_plans_were_made_is_planned(session_path):
    with ContextWorkspace.open(session_path, no_store=True, model=MODEL) as workspace:
        plan = workspace.plan()
        first = workspace.context.messages[0]
        assert first.id not in {item.message_id for item in plan.items}  # cut before it is pinned
        run_context_command_text(workspace, f"/context pin {first.source_entry_id}")
        workspace.refresh()
        pinned = workspace.plan()
        assert any(item.message_id == first.id and item.kind == "pin" for item in pinned.items)
        run_context_command_text(workspace, f"/context unpin {first.source_entry_id}")
        workspace.refresh()
        assert first.id not in {item.message_id for item in workspace.plan().items if item.kind == "pin"}


def test_a_compaction_keeps_the_digest_head_and_appends_to_its_lists(session_path):
    texts = []
    with ContextWorkspace.open(session_path, no_store=True, model=MODEL) as workspace:
        for step in range(120):
            note = f"Later note {step}: " + "keep going with the logging parts " * 20
            append_pi_entries(session_path, [pi_message("user", note)])
            workspace.refresh()
            plan = workspace.plan()
            digest = next(m for i, m in zip(plan.items, plan.messages, strict=True) if i.kind == "summary")
            if not texts or digest.blocks[0].text != texts[-1]:
                texts.append(digest.blocks[0].text)
    assert len(texts) > 2  # it was rebuilt at compactions
    for older, newer in itertools.pairwise(texts):
        head = older.split("\nLatest instructions")[0].split("\nFiles read")[0]
        assert newer.startswith(head)  # the request, first instructions and changed files stay in front


@pytest.mark.parametrize(
    ("text", "failed", "status"),
    [
        ("Build OK\nExit Status: 3\nlink error in main.o", False, "exit 3"),  # mixed case, not flagged
        ("EXIT CODE=0\nall good", False, ""),
        ("[Exit Code 4]", False, "exit 4"),
        ("no word of how it ended", True, "error"),
        ("42 files checked", False, ""),
    ],
)
def test_a_results_exit_status_is_read_whatever_its_case(tmp_path, text, failed, status):
    early = [_shell_call("build-1", "make all"), _shell_result("build-1", text, failed=failed)]
    path = write_long_session(tmp_path / "exit.jsonl", early=early)
    with ContextWorkspace.open(path, no_store=True, model=MODEL) as workspace:
        plan = workspace.plan()
    digest = _digest_of(plan)[1].blocks[0].text
    assert ("make all (" + status + ")" in digest) if status else ("make all (" not in digest), digest


def _test_run(failures, passed=1_500):
    """A long ``pytest`` output (``passed`` lines) that ends in ``failures``, as the shell returns it."""
    lines = [f"tests/test_cli.py::test_case_{n:04d} PASSED" for n in range(passed)]
    return "\n".join([*lines, "=== FAILURES ===", *failures, "[exit code 1]"])


def test_a_rerun_that_fails_otherwise_keeps_the_earlier_error_in_the_plan(tmp_path):
    # The same command fails twice in the newest results, each time with another error, and both long
    # results are cut: the digest must not let the second failure hide what the first one said.
    rerun = "pytest -q tests/test_cli.py -x"
    tail = [
        _shell_call("run-1", rerun),
        _shell_result("run-1", _test_run(["E   KeyError: 'cli-550'"]), failed=True),
        pi_message("assistant", [{"type": "text", "text": "Fixing the key lookup."}]),
        _shell_call("run-2", rerun),
        _shell_result("run-2", _test_run(["E   KeyError: 'cli-761'"]), failed=True),
        _shell_call("run-3", rerun),
        _shell_result("run-3", _test_run(["E   KeyError: 'cli-761'"]), failed=True),  # the same again
        pi_message("user", "Where are we with the CLI tests?"),
    ]
    path = write_long_session(tmp_path / "rerun.jsonl", steps=20)
    append_pi_entries(path, tail)
    with ContextWorkspace.open(path, no_store=True, model=MODEL) as workspace:
        plan = workspace.plan()
    sent = "\n".join(
        block.text for message in plan.messages for block in message.blocks if hasattr(block, "text")
    )
    assert "test_case_0001 PASSED" not in sent  # the results themselves are cut: only the digest has them
    text = _digest_of(plan)[1].blocks[0].text
    errors = next(line for line in text.splitlines() if line.startswith("Recent errors"))
    # one entry for the call, its newest error first, the other one its failures said after it, once
    assert f"bash {rerun}: E KeyError: 'cli-761' (earlier: E KeyError: 'cli-550')" in errors
    assert errors.count("cli-761") == 1


def test_an_earlier_error_of_a_call_that_passed_since_is_kept_before_the_mark(tmp_path):
    rerun = "pytest -q tests/test_cli.py -x"
    tail = [
        _shell_call("run-1", rerun),
        _shell_result("run-1", _test_run(["E   KeyError: 'cli-550'"]), failed=True),
        _shell_call("run-2", rerun),
        _shell_result("run-2", _test_run(["E   KeyError: 'cli-761'"]), failed=True),
        _shell_call("run-3", rerun),
        _shell_result(
            "run-3", _test_run([], passed=2_000).replace("[exit code 1]", "all passed"), failed=False
        ),
        pi_message("user", "Good, what is next?"),
    ]
    path = write_long_session(tmp_path / "passed.jsonl", steps=20)
    append_pi_entries(path, tail)
    with ContextWorkspace.open(path, no_store=True, model=MODEL) as workspace:
        plan = workspace.plan()
    text = _digest_of(plan)[1].blocks[0].text
    assert f"bash {rerun}: E KeyError: 'cli-761' (earlier: E KeyError: 'cli-550') (passed since)" in text
