"""/context summaries, compaction, retrieved and artifacts over real Pi files and real SQLite stores."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
from pathlib import Path

import msgspec
import pytest
from _long_session import FACT, pi_message, write_long_session
from rich.console import Console
from typer.testing import CliRunner

from ds4_context_core import ModelDescriptor
from ds4_context_core.summaries import SUMMARY_SECTIONS
from ds4_context_engine._exceptions import CommandError
from ds4_context_engine.cli import app
from ds4_context_engine.commands import (
    CONTEXT_COMMANDS,
    ArtifactsResult,
    CompactionResult,
    ContextWorkspace,
    RetrievedResult,
    SummariesResult,
    context_artifacts,
    context_compaction,
    context_retrieved,
    context_summaries,
    render_json,
    render_rich,
    render_text,
    run_context_command,
    run_context_command_text,
)
from ds4_context_engine.pi import append_pi_entries, append_pi_entry, create_pi_session
from ds4_context_engine.store import ARTIFACT_THRESHOLD_CHARS

FIXTURES = Path(__file__).parent / "fixtures" / "pi"
SMALL = ModelDescriptor(provider="openai", id="gpt-4.1-mini", context_window=32_000, max_tokens=2_000)
LARGE = ModelDescriptor(provider="openai", id="gpt-4.1", context_window=1_000_000, max_tokens=8_000)
VIEWS = ("summaries", "compaction", "retrieved", "artifacts")
runner = CliRunner()

# a summary that keeps the task: every section, files and exact values all from the session before it
GOOD_SUMMARY = """## Objective
Port the CLI flags to typer.
## User Constraints
- keep `--verbose`
## Durable Decisions
typer replaces argparse
## Completed Work
read the parser
## Current State
ready to port
## Files Read
- `src/cli.py`
## Files Modified
none
## Commands / Tests
- `pytest -q`
## Errors / Risks
none
## Open Questions
none
## Next Actions
port the flags
## Critical Exact Values
- `window=4096`
"""
SECRET_WORD = "zebra-sentinel-4471"


def _session(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A session with a valid compaction, an invalid one off the branch, a branch summary and a large
    tool output; returns the path and the ids that matter."""
    path = tmp_path / "sessions" / "views.jsonl"
    create_pi_session(path, cwd=str(tmp_path), session_id="views", timestamp="2026-03-01T09:00:00.000Z")
    first = append_pi_entries(
        path,
        [
            pi_message("user", "Port the CLI flags to typer, keep --verbose, window=4096."),
            pi_message(
                "assistant",
                [{"type": "toolCall", "id": "c1", "name": "read", "arguments": {"path": "src/cli.py"}}],
            ),
            pi_message(
                "toolResult",
                [{"type": "text", "text": "x" * (ARTIFACT_THRESHOLD_CHARS + 10)}],
                toolCallId="c1",
                toolName="read",
                isError=False,
            ),
            ("message", {"message": {"role": "bashExecution", "command": "pytest -q", "output": "3 passed"}}),
        ],
    )
    ids = {"user": first[0].id, "call": first[1].id, "big": first[2].id, "bash": first[3].id}
    # an invalid compaction on a branch that is then left: off the active branch
    (off,) = append_pi_entries(
        path,
        [
            (
                "compaction",
                {
                    "summary": f"Goal: port flags. Touched `src/{SECRET_WORD}.py`.",
                    "firstKeptEntryId": ids["bash"],
                    "tokensBefore": 900,
                },
            )
        ],
    )
    ids["off"] = off.id
    # back on the main line: a branch summary of the left branch, then the valid compaction
    (branch_summary,) = append_pi_entries(
        path,
        [("branch_summary", {"summary": f"## Objective\ntried `src/{SECRET_WORD}.py`", "fromId": off.id})],
        parent_id=ids["bash"],
    )
    ids["branch_summary"] = branch_summary.id
    (compaction,) = append_pi_entries(
        path,
        [("compaction", {"summary": GOOD_SUMMARY, "firstKeptEntryId": ids["call"], "tokensBefore": 5200})],
    )
    ids["compaction"] = compaction.id
    (last,) = append_pi_entries(path, [pi_message("user", "Continue with the port.")])
    ids["last"] = last.id
    return path, ids


@pytest.fixture
def views(tmp_path):
    path, ids = _session(tmp_path)
    workspace = ContextWorkspace.open(path, store_path=tmp_path / "state" / "derived.sqlite3")
    yield workspace, ids
    workspace.close()


def _cli(*args):
    return runner.invoke(app, [str(arg) for arg in args], catch_exceptions=False)


def test_the_new_views_are_context_commands():
    assert set(VIEWS) <= set(CONTEXT_COMMANDS)
    assert sorted(CONTEXT_COMMANDS) == list(CONTEXT_COMMANDS)


def test_summaries_judges_each_summary_against_what_came_before_it(views):
    workspace, ids = views
    result = context_summaries(workspace)
    assert isinstance(result, SummariesResult)
    assert result.contract_version == "summary-contract-v1"
    assert (result.summaries, result.valid, result.invalid) == (3, 1, 2)
    by_id = {line.entry_id: line for line in result.entries}
    assert [line.entry_id for line in result.entries] == [
        ids["off"],
        ids["branch_summary"],
        ids["compaction"],
    ]

    good = by_id[ids["compaction"]]
    assert (good.kind, good.on_branch, good.valid, good.problems) == ("compaction", True, True, ())
    assert (good.chars, good.tokens_before) == (len(GOOD_SUMMARY), 5200)
    # root, its three entries and the branch summary stand before it
    assert good.source_entries == 5

    off = by_id[ids["off"]]
    assert (off.kind, off.on_branch, off.valid, off.tokens_before) == ("compaction", False, False, 900)
    assert len([label for label in off.problems if label.startswith("summary-section-missing:")]) == 12

    left = by_id[ids["branch_summary"]]
    assert (left.kind, left.on_branch, left.valid, left.tokens_before) == (
        "branch-summary",
        True,
        False,
        None,
    )
    # the branch it summarises (with the off-branch compaction naming the word) counts as its source
    assert not any(label.startswith("summary-exact-value-not-in-source") for label in left.problems)
    assert "summary-section-missing:User Constraints" in left.problems
    assert left.source_entries == 5


def test_a_value_the_session_never_had_makes_a_summary_invalid(tmp_path):
    path, _ = _session(tmp_path)
    broken = GOOD_SUMMARY.replace("`window=4096`", "`window=8192`").replace("src/cli.py", "src/app.py")
    (entry,) = append_pi_entries(path, [("compaction", {"summary": broken, "firstKeptEntryId": None})])
    with ContextWorkspace.open(path, no_store=True) as workspace:
        line = next(line for line in context_summaries(workspace).entries if line.entry_id == entry.id)
    assert not line.valid
    assert line.problems == (
        "summary-file-not-in-source:Files Read",
        "summary-exact-value-not-in-source:Critical Exact Values",
    )
    assert "summary-file-not-in-source" in line.text_line


def test_summaries_of_the_pi_fixtures(tmp_path):
    for name, entry_id, kind in (
        ("v3-compacted", "c0000005", "compaction"),
        ("v2-branches", "b0000005", "branch-summary"),
    ):
        path = tmp_path / f"{name}.jsonl"
        shutil.copy(FIXTURES / f"{name}.jsonl", path)
        with ContextWorkspace.open(path, no_store=True) as workspace:
            result = context_summaries(workspace)
        (line,) = result.entries
        assert (line.entry_id, line.kind, line.valid) == (entry_id, kind, False)
        # Pi's own free-form summaries name no contract section
        assert line.problems == tuple(f"summary-section-missing:{section}" for section in SUMMARY_SECTIONS)
        assert "summary-section-missing x12" in line.text_line


def test_summaries_never_show_summary_or_session_text(views):
    workspace, _ = views
    result = context_summaries(workspace)
    for rendered in (render_text(result), render_json(result), _rich(result)):
        assert SECRET_WORD not in rendered
        assert "typer replaces argparse" not in rendered
        assert "Port the CLI" not in rendered


def _rich(result) -> str:
    console = Console(width=240, record=True, file=io.StringIO())
    console.print(render_rich(result))
    return console.export_text()


def test_compaction_lists_what_each_compaction_cut(views):
    workspace, ids = views
    result = context_compaction(workspace)
    assert isinstance(result, CompactionResult)
    assert result.applied_entry_id == ids["compaction"]
    first, second = result.compactions
    assert (first.entry_id, first.on_branch, first.applied) == (ids["off"], False, False)
    assert (first.first_kept_entry_id, first.first_kept_found) == (ids["bash"], True)
    assert (first.cut_entries, first.kept_entries, first.tokens_before) == (3, 1, 900)
    assert (second.entry_id, second.on_branch, second.applied) == (ids["compaction"], True, True)
    assert (second.first_kept_entry_id, second.first_kept_found) == (ids["call"], True)
    # the first request cut; call, result, bash and branch summary kept
    assert (second.cut_entries, second.kept_entries, second.tokens_before) == (1, 4, 5200)
    assert second.summary_chars == len(GOOD_SUMMARY)
    # no model: says so instead of planning
    assert result.model is None
    assert result.would_compact is None
    assert result.plan.startswith("no model")
    assert result.plan_tokens_before is None


def test_compaction_with_a_model_says_whether_a_plan_would_compact(tmp_path, views):
    workspace, _ = views
    workspace.model = LARGE
    roomy = context_compaction(workspace)
    assert roomy.model == "openai:gpt-4.1"
    assert roomy.would_compact is False
    assert roomy.plan.startswith("would not compact")
    assert roomy.plan_tokens_before == roomy.plan_tokens_after
    assert (roomy.trimmed_messages, roomy.receipts, roomy.dropped_messages) == (0, 0, 0)

    long_path = write_long_session(tmp_path / "long" / "session.jsonl")
    with ContextWorkspace.open(long_path, no_store=True, model=SMALL) as long_workspace:
        tight = context_compaction(long_workspace)
        preview = run_context_command(long_workspace, "compact-preview")
    assert tight.compactions == ()
    assert tight.would_compact is True
    assert tight.plan == "would compact now"
    assert tight.plan_tokens_after < tight.plan_tokens_before
    assert (tight.plan_tokens_before, tight.plan_tokens_after) == (
        preview.tokens_before,
        preview.tokens_after,
    )


def test_compaction_reports_a_first_kept_entry_off_its_branch(tmp_path):
    path = tmp_path / "s.jsonl"
    create_pi_session(path, cwd=str(tmp_path), session_id="s")
    append_pi_entry(path, *pi_message("user", "hello"))
    append_pi_entry(path, "compaction", {"summary": "", "firstKeptEntryId": "nowhere1"})
    with ContextWorkspace.open(path, no_store=True) as workspace:
        (line,) = context_compaction(workspace).compactions
        (summary,) = context_summaries(workspace).entries
    assert (line.first_kept_found, line.cut_entries, line.kept_entries) == (False, 1, 0)
    assert (line.tokens_before, line.summary_chars) == (None, 0)
    assert summary.problems == ("summary-empty",)


def test_retrieved_lists_the_plans_retrieved_history_items(tmp_path):
    path = write_long_session(tmp_path / "sessions" / "retrieval.jsonl")
    store_path = tmp_path / "state" / "derived.sqlite3"
    with ContextWorkspace.open(path, store_path=store_path, model=SMALL) as workspace:
        result = context_retrieved(workspace)
        plan = workspace.plan()
        early = next(m for m in workspace.context.messages if m.role == "tool")
        text = run_context_command_text(workspace, "/context retrieved")
        as_json = render_json(result)
    assert isinstance(result, RetrievedResult)
    assert result.store is True
    assert result.retrieval_hits == workspace.retrieval_hits
    planned = [item for item in plan.items if item.kind == "retrieved-history"]
    assert len(result.items) == len(planned) >= 1
    first = result.items[0]
    assert first.item_id == planned[0].message_id
    assert first.source_entry_ids == (early.source_entry_id,)
    assert first.tokens == planned[0].tokens > 0
    assert first.reason == planned[0].reason
    assert first.score == planned[0].score
    assert result.total_tokens == sum(item.tokens for item in result.items)
    assert text.startswith("/context retrieved\nstore: yes")
    assert early.source_entry_id in text
    for rendered in (text, as_json):
        assert "test_rounds_twice" not in rendered
        assert FACT not in rendered


def test_retrieved_without_a_store_or_model(tmp_path):
    path = write_long_session(tmp_path / "sessions" / "retrieval.jsonl")
    with ContextWorkspace.open(path, no_store=True, model=SMALL) as workspace:
        result = context_retrieved(workspace)
        assert (result.store, result.items, result.total_tokens) == (False, (), 0)
        assert "items: -" in run_context_command_text(workspace, "retrieved")
    with ContextWorkspace.open(path, no_store=True) as workspace:
        with pytest.raises(CommandError) as caught:
            context_retrieved(workspace)
        assert caught.value.code == "model-unknown"
        assert run_context_command_text(workspace, "retrieved").startswith("/context error [model-unknown]")


def test_artifacts_lists_the_large_outputs_the_store_keeps(views):
    workspace, ids = views
    result = context_artifacts(workspace)
    assert isinstance(result, ArtifactsResult)
    body = ("x" * (ARTIFACT_THRESHOLD_CHARS + 10)).encode()
    (line,) = result.artifacts
    assert line.entry_id == ids["big"]
    assert line.artifact_id == hashlib.sha256(body).hexdigest()
    assert line.size_bytes == len(body)
    assert line.on_branch is True
    assert result.total_bytes == len(body)
    assert result.threshold_chars == ARTIFACT_THRESHOLD_CHARS
    assert (result.store_artifacts, result.store_artifact_bytes) == (1, len(body))
    text = run_context_command_text(workspace, "/context artifacts")
    assert line.artifact_id in text
    assert "xxxxxxxx" not in text
    assert b"xxxxxxxx" not in msgspec.json.encode(result)


def test_artifacts_of_a_session_without_large_outputs_and_without_a_store(tmp_path):
    path = tmp_path / "coding.jsonl"
    shutil.copy(FIXTURES / "v3-coding.jsonl", path)
    with ContextWorkspace.open(path, store_path=tmp_path / "derived.sqlite3") as workspace:
        result = context_artifacts(workspace)
        assert (result.artifacts, result.total_bytes) == ((), 0)
    with ContextWorkspace.open(path, no_store=True) as workspace:
        with pytest.raises(CommandError) as caught:
            context_artifacts(workspace)
        assert caught.value.code == "command-needs-store"
        assert run_context_command_text(workspace, "artifacts") == (
            "/context error [command-needs-store]: /context artifacts needs a derived store"
        )


@pytest.mark.parametrize("name", VIEWS)
def test_each_view_through_the_slash_command_text(views, name):
    workspace, _ = views
    workspace.model = LARGE
    text = run_context_command_text(workspace, f"/context {name}")
    assert text.startswith(f"/context {name}\n")
    assert SECRET_WORD not in text
    assert run_context_command_text(workspace, f"/context {name} extra").startswith(
        "/context error [command-argument-invalid]"
    )
    result = run_context_command(workspace, name)
    assert json.loads(render_json(result))["command"] == name
    assert f"/context {name}" in _rich(result)


@pytest.mark.parametrize("name", VIEWS)
def test_each_view_through_the_cli(tmp_path, name):
    path, ids = _session(tmp_path)
    store = tmp_path / "state" / "derived.sqlite3"
    result = _cli(name, path, "--store", store, "--model", "openai:gpt-4.1", "--window", 1_000_000, "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload["command"] == name
    assert SECRET_WORD not in result.output
    table = _cli(name, path, "--store", store, "--model", "openai:gpt-4.1", "--window", 1_000_000)
    assert table.exit_code == 0, table.output
    assert f"/context {name}" in table.output
    if name == "summaries":
        assert [entry["entry_id"] for entry in payload["entries"]] == [
            ids["off"],
            ids["branch_summary"],
            ids["compaction"],
        ]
    elif name == "compaction":
        assert payload["applied_entry_id"] == ids["compaction"]
        assert payload["would_compact"] is False
    elif name == "artifacts":
        assert [artifact["entry_id"] for artifact in payload["artifacts"]] == [ids["big"]]
    else:
        assert payload["store"] is True


def test_cli_views_without_a_model_or_a_store(tmp_path):
    path, _ = _session(tmp_path)
    compaction = _cli("compaction", path, "--no-store", "--json")
    assert compaction.exit_code == 0
    assert json.loads(compaction.output)["would_compact"] is None
    summaries = _cli("summaries", path, "--no-store")
    assert summaries.exit_code == 0
    assert "summary-contract-v1" in summaries.output
    retrieved = _cli("retrieved", path, "--no-store")
    assert retrieved.exit_code == 2
    assert "error [model-unknown]" in retrieved.output
    artifacts = _cli("artifacts", path, "--no-store")
    assert artifacts.exit_code == 2
    assert "error [command-needs-store]" in artifacts.output


def test_cli_help_lists_the_views():
    result = _cli("--help")
    assert result.exit_code == 0
    for name in VIEWS:
        assert name in result.output
