"""The ds4-context CLI end to end, through its typer app, on real files."""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ds4_context_engine import __version__
from ds4_context_engine.cli import EXIT_ERROR, EXIT_FAILED, EXIT_FALLBACK, EXIT_USAGE, app
from ds4_context_engine.commands import write_demo_session

FIXTURES = Path(__file__).parent / "fixtures" / "pi"
runner = CliRunner()


@pytest.fixture
def coding(tmp_path):
    path = tmp_path / "coding.jsonl"
    shutil.copy(FIXTURES / "v3-coding.jsonl", path)
    return path


@pytest.fixture(scope="module")
def demo_session(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli-demo")
    return write_demo_session(root / "demo.jsonl", cwd=str(root))


def _run(*args):
    return runner.invoke(app, [str(arg) for arg in args], catch_exceptions=False)


def test_help_lists_every_command():
    result = _run("--help")
    assert result.exit_code == 0
    for name in (
        "demo",
        "plan",
        "index",
        "conformance",
        "status",
        "adapter",
        "tokens",
        "manifest",
        "explain",
        "included",
        "excluded",
        "pins",
        "pin",
        "unpin",
        "memory",
        "privacy",
        "model",
        "compact-preview",
        "restore",
        "storage",
        "health",
        "rebuild-index",
        "config",
    ):
        assert name in result.output


def test_version():
    result = _run("version")
    assert (result.exit_code, result.output.strip()) == (0, __version__)


def test_status_json(coding):
    result = _run("status", coding, "--no-store", "--json")
    assert result.exit_code == 0
    body = json.loads(result.output)
    assert (body["session_id"], body["entries"], body["context_messages"]) == (
        "4f1c2a7e-0b5d-4a8e-9c1f-2d3e4f5a6b7c",
        16,
        10,
    )


@pytest.mark.parametrize(
    "command",
    ["status", "adapter", "tokens", "pins", "privacy", "model", "storage", "health", "config"],
)
def test_read_commands_render_tables_and_json(coding, tmp_path, command):
    store = tmp_path / "state" / "d.sqlite3"
    table = _run(command, coding, "--store", store)
    assert table.exit_code == 0, table.output
    assert f"/context {command}" in table.output
    as_json = _run(command, coding, "--store", store, "--json")
    assert json.loads(as_json.output)["command"] == command


def test_plan_shows_kept_receipted_and_left_out(demo_session, tmp_path):
    result = _run("plan", demo_session, "--model", "openai:gpt-4.1-mini", "--window", "26000", "--no-store")
    assert result.exit_code == 0, result.output
    for heading in ("kept (in the plan)", "left out", "recent-tail", "layer-1-trimmed"):
        assert heading in result.output
    as_json = _run(
        "plan", demo_session, "--model", "openai:gpt-4.1-mini", "--window", "26000", "--no-store", "--json"
    )
    body = json.loads(as_json.output)
    assert body["command"] == "plan"
    assert body["manifest"]["planned_tokens"] <= body["budget"]["hard_limit"]
    assert body["manifest"]["exclusions"]


def test_plan_commands_need_a_model(coding):
    result = _run("manifest", coding, "--no-store")
    assert result.exit_code == 2
    assert "error [model-unknown]" in result.stderr


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["--model", "no-colon", "--window", "1000"], "model-reference"),
        (["--model", "openai:gpt-4.1"], "window-required"),
    ],
)
def test_bad_model_arguments_fail_with_codes(coding, args, code):
    before = coding.read_bytes()
    result = _run("manifest", coding, "--no-store", *args)
    assert result.exit_code == EXIT_USAGE
    assert f"error [{code}" in result.stderr
    assert coding.read_bytes() == before


def test_missing_and_damaged_files_fail_with_codes(tmp_path):
    missing = _run("status", tmp_path / "nope.jsonl", "--no-store")
    assert missing.exit_code == 2
    assert "error [pi-session-not-found]" in missing.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"not json\n")
    damaged = _run("status", bad, "--no-store")
    assert damaged.exit_code == 2
    assert "error [pi-session-header-invalid]" in damaged.stderr
    assert bad.read_bytes() == b"not json\n"


def test_a_store_path_naming_the_session_itself_is_refused_and_the_session_kept(coding):
    before = coding.read_bytes()
    result = _run("status", coding, "--store", coding)
    assert result.exit_code == 2
    assert "error [derived-store-path-foreign]" in result.stderr
    assert coding.read_bytes() == before
    assert _run("status", coding, "--no-store").exit_code == 0


def test_pin_memory_and_unpin_through_the_cli(coding, tmp_path):
    store = tmp_path / "d.sqlite3"
    pinned = _run("pin", coding, "a0000003", "--label", "task", "--store", store, "--json")
    assert json.loads(pinned.output)["pins"][0]["entry_id"] == "a0000003"
    memory = _run("memory", coding, "--add", "uses vitest", "--store", store, "--json")
    assert json.loads(memory.output)["items"][0]["preview"] == "uses vitest"
    unpinned = _run("unpin", coding, "a0000003", "--store", store, "--json")
    assert json.loads(unpinned.output)["pins"] == []
    refused = _run("unpin", coding, "a0000003", "--store", store)
    assert refused.exit_code == 2
    assert "error [pin-not-found]" in refused.stderr


def test_index_is_incremental_across_runs(coding, tmp_path):
    store = tmp_path / "d.sqlite3"
    first = json.loads(
        _run("index", coding, FIXTURES / "v2-branches.jsonl", "--store", store, "--json").output
    )
    assert first["command"] == "index"
    assert [report["mode"] for report in first["reports"]] == ["full", "full"]
    again = json.loads(_run("index", coding, "--store", store, "--json").output)["reports"]
    assert again[0]["mode"] == "unchanged"
    with coding.open("ab") as handle:
        handle.write(
            b'{"type":"message","id":"abcdef12","parentId":"a0000010","timestamp":"t",'
            b'"message":{"role":"user","content":"more","timestamp":1}}\n'
        )
    grown = json.loads(_run("index", coding, "--store", store, "--json").output)["reports"]
    assert (grown[0]["mode"], grown[0]["entries_indexed"]) == ("incremental", 1)
    rebuilt = json.loads(_run("index", coding, "--store", store, "--rebuild", "--json").output)["reports"]
    assert rebuilt[0]["mode"] == "full"
    table = _run("index", coding, "--store", store)
    assert "unchanged" in table.output


def test_explain_restore_and_compact_preview(demo_session):
    model = ["--model", "openai:gpt-4.1-mini", "--window", "26000", "--no-store"]
    included = json.loads(_run("included", demo_session, *model, "--json").output)
    trimmed = next(item for item in included["items"] if item["kind"] == "trimmed-tool-result")
    restored = json.loads(_run("restore", demo_session, trimmed["message_id"], *model, "--json").output)
    assert [m["message_id"] for m in restored["messages"]] == [trimmed["message_id"]]
    explained = json.loads(_run("explain", demo_session, trimmed["message_id"], *model, "--json").output)
    assert (explained["in_plan"], explained["kind"], explained["reason"]) == (
        True,
        "trimmed-tool-result",
        "layer-1-trimmed",
    )
    preview = _run("compact-preview", demo_session, *model)
    assert preview.exit_code == 0
    assert "dry run" in preview.output


def test_conformance_command_passes_for_the_pi_adapter():
    result = _run("conformance", "--json")
    assert result.exit_code == 0
    body = json.loads(result.output)
    assert body["passed"] is True
    assert [case["id"] for case in body["cases"]] == [
        "identity",
        "capabilities",
        "canonical-history",
        "rebuild",
        "privacy",
        "fallback",
        "lifecycle",
    ]


def test_conformance_rejects_an_unknown_backend():
    result = _run("conformance", "--backend", "curio")
    assert result.exit_code == EXIT_USAGE
    assert "error [backend-unknown]" in result.stderr


def test_demo_runs_offline_and_cleans_up():
    result = _run("demo", "--json")
    assert result.exit_code == 0
    body = json.loads(result.output)
    assert body["conformance"]["passed"] is True
    assert body["restored"]["messages"]
    kinds = {item["kind"] for item in body["items"]}
    assert {"trimmed-tool-result", "pin", "current-request"} <= kinds
    assert any(exclusion["reason"] == "before-cut" for exclusion in body["manifest"]["exclusions"])
    assert not Path(body["directory"]).exists()


def test_demo_tables_and_keep_directory(tmp_path):
    target = tmp_path / "kept"
    result = _run("demo", "--keep", target)
    assert result.exit_code == 0, result.output
    for text in ("kept (in the plan)", "left out", "restore", "What the model sees instead", "passed"):
        assert text in result.output
    assert (target / "sessions" / "demo.jsonl").is_file()
    again = _run("demo", "--keep", target)
    assert again.exit_code == 2
    assert "error [demo-directory-exists]" in again.stderr


def test_demo_json_lists_the_commands_that_show_its_plan_and_restore_again(tmp_path):
    body = json.loads(_run("demo", "--keep", tmp_path / "kept", "--json").stdout)
    assert body["kept"] is True
    plan_line, restore_line = body["next_commands"]
    text = _run("demo", "--keep", tmp_path / "again").stdout
    assert plan_line.replace(str(tmp_path / "kept"), str(tmp_path / "again")) in text  # as the text demo
    # run as printed: the same plan, and the same originals restored
    planned = _run(*shlex.split(plan_line)[1:], "--json")
    assert planned.exit_code == 0, planned.stderr
    assert json.loads(planned.stdout)["manifest"] == body["manifest"]
    restored = _run(*shlex.split(restore_line)[1:], "--json")
    assert restored.exit_code == 0, restored.stderr
    assert json.loads(restored.stdout)["messages"] == body["restored"]["messages"]
    # without --keep the files are gone: no command to offer
    assert json.loads(_run("demo", "--json").stdout)["next_commands"] == []


def test_compact_is_dry_run_only(demo_session):
    model = ["--model", "openai:gpt-4.1-mini", "--window", "26000", "--no-store"]
    before = demo_session.read_bytes()
    preview = json.loads(_run("compact", demo_session, "--dry-run", *model, "--json").output)
    assert (preview["command"], preview["dry_run"]) == ("compact-preview", True)
    assert preview["tokens_after"] <= preview["tokens_before"]
    refused = _run("compact", demo_session, "--write", *model)
    assert refused.exit_code == EXIT_USAGE
    assert "error [compact-write-unsupported]" in refused.stderr
    assert demo_session.read_bytes() == before


def test_conformance_accepts_a_factory_target_and_reports_bad_ones():
    named = _run("conformance", "ds4_context_engine.pi:pi_session_conformance_factory", "--json")
    assert named.exit_code == 0
    report = json.loads(named.output)
    assert (report["command"], report["factory_name"]) == ("conformance", "ds4-context-engine.pi")
    bad = _run("conformance", "not-a-target")
    assert bad.exit_code == 2
    assert "error [conformance-target-invalid]" in bad.stderr


@pytest.mark.parametrize("target", ["not-a-target", "definitely_absent_module_xyz:factory"])
def test_the_kit_and_the_cli_print_a_bad_target_as_the_same_one_line(target, capsys):
    from ds4_context_core.conformance import main as kit  # noqa: PLC0415

    cli = _run("conformance", target)
    assert kit([target]) == cli.exit_code == EXIT_ERROR
    line = capsys.readouterr().err
    assert line == cli.stderr  # one convention: error [code]: message
    assert line.startswith("error [conformance-target-")
    assert line.count("\n") == 1


def test_plan_takes_the_model_the_session_records_when_only_the_window_is_given(demo_session):
    named = _run("plan", demo_session, "--window", "20000", "--no-store", "--json")
    assert named.exit_code == 0, named.stderr
    status = json.loads(_run("status", demo_session, "--no-store", "--json").output)
    explicit = _run(
        "plan", demo_session, "--model", f"{status['provider']}:{status['model_id']}", "--window", "20000",
        "--no-store", "--json",
    )  # fmt: skip
    assert json.loads(named.output) == json.loads(explicit.output)
    missing = _run("plan", demo_session, "--no-store")
    assert missing.exit_code == EXIT_ERROR
    assert "error [model-unknown]" in missing.stderr


@pytest.mark.parametrize(
    "command", ["status", "manifest", "compact", "explain", "restore", "pin", "unpin", "memory", "plan"]
)
def test_session_commands_share_one_definition_of_each_workspace_option(command):
    # the same option reads the same everywhere: one definition, not eight copies
    text = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"}).output
    assert "Derived store: a SQLite file, or a postgresql:// URL" in text
    assert "--no-store  " in text
    assert "Keep derived state in memory only." in text
    assert "Print JSON instead of tables." in text
    planning = command not in ("pin", "unpin", "memory")
    assert ("Plan the branch ending at this entry id." in text) is planning
    assert ("A ds4-context-config-v1 JSON file." in text) is planning
    assert ("The model's output limit (default: none" in text) is planning


def test_restore_accepts_the_bare_receipt_id_the_plan_table_prints(demo_session):
    # a window where the demo's plan holds one receipt (core's compaction cuts to its low-water mark)
    model = ["--window", "22000", "--no-store"]
    plan = json.loads(_run("plan", demo_session, *model, "--json").output)
    (receipt,) = plan["manifest"]["receipts"]
    bare = receipt["receipt_id"].rsplit(":", 1)[1]
    table = runner.invoke(app, ["plan", str(demo_session), *model], env={"COLUMNS": "200"}).output
    assert bare in table
    restored = _run("restore", demo_session, bare, *model, "--json")
    assert restored.exit_code == 0, restored.stderr
    body = json.loads(restored.output)
    assert (body["kind"], body["restored_id"], body["receipt_id"]) == (
        "receipt",
        receipt["receipt_id"],
        receipt["receipt_id"],
    )
    assert [message["message_id"] for message in body["messages"]] == receipt["original_message_ids"]
    assert (body["original_tokens"], body["planned_tokens"]) == (
        receipt["original_tokens"],
        receipt["receipt_tokens"],
    )


def test_restore_of_a_trimmed_result_names_the_message_and_what_it_weighs(demo_session):
    model = ["--window", "26000", "--no-store"]
    plan = json.loads(_run("plan", demo_session, *model, "--json").output)
    trimmed = next(item for item in plan["items"] if item["kind"] == "trimmed-tool-result")
    body = json.loads(_run("restore", demo_session, trimmed["message_id"], *model, "--json").output)
    assert (body["kind"], body["restored_id"], body["receipt_id"]) == (
        "trimmed-tool-result",
        trimmed["message_id"],
        None,
    )
    assert body["planned_tokens"] == trimmed["tokens"]
    assert body["original_tokens"] > trimmed["tokens"]
    table = runner.invoke(
        app, ["restore", str(demo_session), trimmed["message_id"], *model], env={"COLUMNS": "200"}
    ).output
    assert "original tokens  0 " not in table
    assert trimmed["message_id"] in table


def test_exit_status_tells_usage_errors_from_errors_with_a_code(coding, tmp_path):
    # 64: the command line is wrong, whatever the files hold; nothing was read
    assert _run("plan", tmp_path / "missing.jsonl", "--window", "0").exit_code == EXIT_USAGE
    assert _run("plan", tmp_path / "missing.jsonl", "--bogus").exit_code == EXIT_USAGE
    assert _run("no-such-command").exit_code == EXIT_USAGE
    wrong = _run("plan", tmp_path / "missing.jsonl", "--model", "openai:gpt-4.1")
    assert (wrong.exit_code, wrong.stderr.strip()) == (
        EXIT_USAGE,
        "error [window-required]: --model needs --window N (the context window in tokens)",
    )
    # 2: the line was fine, the session was not
    missing = _run("plan", tmp_path / "missing.jsonl", "--window", "1000")
    assert missing.exit_code == EXIT_ERROR
    assert missing.stderr.startswith("error [pi-session-not-found]")
    assert len(missing.stderr.splitlines()) == 1


def test_version_option_prints_the_version():
    result = _run("--version")
    assert (result.exit_code, result.output.strip()) == (0, __version__)


def test_plan_prints_a_fallback_and_exits_with_its_own_status(demo_session):
    for extra in ((), ("--json",)):
        result = _run("plan", demo_session, "--window", "600", "--no-store", *extra)
        assert result.exit_code == EXIT_FALLBACK
        assert "warning [window-too-small]" in result.stderr
    body = json.loads(result.stdout)
    assert body["manifest"]["fallback"]["code"] == "window-too-small"
    fits = _run("plan", demo_session, "--window", "20000", "--no-store", "--json")
    assert fits.exit_code == 0
    assert json.loads(fits.output)["manifest"]["fallback"] is None


def test_conformance_under_trio_without_trio_is_one_line_and_status_2(monkeypatch, capsys):
    from ds4_context_core.conformance import main as kit  # noqa: PLC0415

    monkeypatch.setitem(sys.modules, "trio", None)  # makes `import trio` fail as if it were not installed
    result = _run("conformance", "--backend", "trio")
    assert result.exit_code == EXIT_ERROR
    assert result.stderr.splitlines() == [
        "error [conformance-backend-unavailable]: the trio backend needs trio: pip install trio"
    ]
    assert "Traceback" not in result.output
    # the kit's own command line says the very same line
    assert kit(["ds4_context_engine.pi:pi_session_conformance_factory", "--backend", "trio"]) == EXIT_ERROR
    assert capsys.readouterr().err == result.stderr


def test_a_failing_conformance_run_exits_1(tmp_path, monkeypatch):
    module = tmp_path / "broken_factory.py"
    module.write_text(
        "from ds4_context_core.conformance import SimpleConformanceFactory\n"
        "def _create(fixture, transport):\n"
        "    raise RuntimeError('no adapter here')\n"
        "FACTORY = SimpleConformanceFactory('broken', _create)\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    result = _run("conformance", "broken_factory:FACTORY", "--json")
    assert result.exit_code == EXIT_FAILED
    assert json.loads(result.output)["passed"] is False


def test_config_mistakes_are_reported_on_stderr_with_codes_and_no_values(coding, tmp_path):
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps({"budget": {"hard_limit_ratio": 7.5}, "planer": {"secret-looking": "sk-not-echoed"}}),
        encoding="utf-8",
    )
    result = _run("status", coding, "--no-store", "--config", config, "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["command"] == "status"  # stdout stays one JSON document
    lines = result.stderr.splitlines()
    assert any(line.startswith("warning [config-key-unknown]: planer") for line in lines)
    assert next(line for line in lines if "budget.hard_limit_ratio" in line).startswith("warning [config-")
    assert "sk-not-echoed" not in result.stderr
    assert "7.5" not in result.stderr
    listed = json.loads(_run("config", coding, "--no-store", "--config", config, "--json").stdout)
    assert len(listed["warnings"]) == len(lines)
    clean = _run("status", coding, "--no-store", "--json")
    assert clean.stderr == ""


def test_plan_and_compact_preview_agree_and_the_plan_counts_add_up(demo_session, tmp_path):
    model = ["--window", "20000", "--store", tmp_path / "d.sqlite3"]
    plan = json.loads(_run("plan", demo_session, *model, "--json").stdout)
    preview = json.loads(_run("compact-preview", demo_session, *model, "--json").stdout)
    manifest = plan["manifest"]
    assert preview["receipts"] == [record["receipt_id"] for record in manifest["receipts"]]
    assert preview["tokens_after"] == manifest["planned_tokens"]
    trimmed_items = [item for item in plan["items"] if item["kind"] == "trimmed-tool-result"]
    assert preview["trimmed_in_plan"] == len(trimmed_items)
    assert preview["trimmed_messages"] == preview["trimmed_in_plan"] + preview["trimmed_in_receipts"]
    receipted = {source for record in manifest["receipts"] for source in record["original_message_ids"]}
    trimmed_ids = set(manifest["compaction"]["trimmed_message_ids"])
    assert preview["trimmed_in_receipts"] == len(trimmed_ids & receipted)
    # the table: "planned N messages + S supplements" and the kept rows total N + S items
    table = runner.invoke(app, ["plan", str(demo_session), *map(str, model)], env={"COLUMNS": "200"}).stdout
    supplements = len(plan["items"]) - manifest["included_messages"]
    assert supplements >= 1  # the task digest stands for the cut history
    planned = f"{manifest['included_messages']} messages + {supplements} supplement"
    assert planned in table
    total = next(line for line in table.splitlines() if " total " in line)
    cells = [cell.strip() for cell in total.strip("│┃ ").split("│")]
    assert cells[-2:] == [str(len(plan["items"])), f"{sum(item['tokens'] for item in plan['items']):,}"]


BENCH_FIXTURES = Path(__file__).resolve().parents[3] / "benchmarks" / "fixtures"


def _pinned_sessions(tmp_path, demo_session):
    """A real Pi session (receipts, a trimmed result, a Pi compaction) and the demo session with a pin."""
    shell = tmp_path / "shell" / "session.jsonl"
    shell.parent.mkdir()
    shutil.copyfile(BENCH_FIXTURES / "pi-shell-session.jsonl", shell)
    pinned = tmp_path / "demo" / "session.jsonl"
    pinned.parent.mkdir()
    shutil.copyfile(demo_session, pinned)
    first_user = next(
        json.loads(line)["id"]
        for line in pinned.read_text().splitlines()
        if '"role":"user"' in line.replace(" ", "")
    )
    assert _run("pin", pinned, first_user, "--label", "the task", "--no-store").exit_code == 0
    # Pi recorded usage in this one: the fixed overhead (system prompt and tools) is measured, not 0
    usage = tmp_path / "usage" / "session.jsonl"
    usage.parent.mkdir()
    shutil.copyfile(BENCH_FIXTURES / "pi-usage-session.jsonl", usage)
    return [(shell, "32000"), (usage, "32000"), (pinned, "16000")]


def test_every_number_of_compact_preview_agrees_with_plan_and_adds_up(tmp_path, demo_session):
    """The summary and the pin are counted the same way by both commands, and each output adds up."""
    fixed_seen = []
    for session, window in _pinned_sessions(tmp_path, demo_session):
        options = ["--window", window, "--store", tmp_path / f"{session.parent.name}.sqlite3"]
        plan = json.loads(_run("plan", session, *options, "--json").stdout)
        preview = json.loads(_run("compact-preview", session, *options, "--json").stdout)
        manifest, items = plan["manifest"], plan["items"]
        assert preview["compacts"] is True
        # the same figures as plan's summary table
        assert preview["history_messages"] == manifest["history_messages"]
        assert preview["tokens_before"] == manifest["native_tokens"]
        fixed = plan["budget"]["fixed_tokens"]
        assert preview["fixed_tokens"] == fixed
        assert (
            preview["tokens_after"] == manifest["planned_tokens"] == fixed + sum(i["tokens"] for i in items)
        )
        assert preview["saved_tokens"] == manifest["saved_tokens"]
        assert preview["tokens_before"] - preview["tokens_after"] == preview["saved_tokens"]
        supplements = [item for item in items if item["original_index"] is None]
        assert supplements  # the task digest at least
        assert preview["supplement_tokens"] == sum(item["tokens"] for item in supplements)
        # every history message is kept, receipted or left out, and plan's left-out table says how many
        left_out = sum(exclusion["count"] for exclusion in manifest["exclusions"])
        assert preview["dropped_messages"] == left_out
        receipted = sum(len(record["original_message_ids"]) for record in manifest["receipts"])
        assert preview["receipted_messages"] == receipted
        kept = [item for item in items if item["original_index"] is not None and item["kind"] != "receipt"]
        assert preview["kept_messages"] == len(kept)
        assert manifest["history_messages"] == len(kept) + receipted + left_out
        assert preview["receipts"] == [record["receipt_id"] for record in manifest["receipts"]]
        assert preview["trimmed_messages"] == preview["trimmed_in_plan"] + preview["trimmed_in_receipts"]
        # and the tables print those numbers the same way (thousands separated)
        table = runner.invoke(app, ["plan", str(session), *map(str, options)], env={"COLUMNS": "200"}).stdout
        shown = runner.invoke(
            app, ["compact-preview", str(session), *map(str, options)], env={"COLUMNS": "200"}
        ).stdout
        assert f"{manifest['native_tokens']:,} tokens" in table
        assert f"{preview['tokens_before']:,}" in shown
        assert f"{preview['saved_tokens']:,} tokens" in table
        assert f"{preview['saved_tokens']:,}" in shown
        total = next(line for line in table.splitlines() if " total " in line)
        assert [cell.strip() for cell in total.strip("│┃ ").split("│")][-2:] == [
            str(len(items)),
            f"{manifest['planned_tokens']:,}",
        ]
        free = next(line for line in table.splitlines() if "free:" in line)
        budget = plan["budget"]
        left = budget["context_window"] - budget["output_reserve"] - manifest["planned_tokens"]
        assert f"free: {left:,} tokens" in free
        included = json.loads(_run("included", session, *options, "--json").stdout)
        assert included["planned_tokens"] == manifest["planned_tokens"]
        assert included["total_tokens"] + included["fixed_tokens"] == included["planned_tokens"]
        if fixed:  # the history line shows the messages' part, the figure `status` estimates
            status = json.loads(_run("status", session, *options, "--json").stdout)
            parts = f"({status['estimated_tokens']:,} + {fixed:,} fixed)"
            assert status["estimated_tokens"] + fixed == manifest["native_tokens"]
            assert parts in table
        fixed_seen.append(fixed)
    assert max(fixed_seen) > 0  # the usage session's overhead is in the totals and the bar
    pins = [item for item in items if item["kind"] == "pin"]
    assert len(pins) == 1  # the demo's pin is in the plan, counted as kept, not as dropped


def test_without_a_window_the_error_asks_for_the_window_only_when_the_session_names_the_model(
    tmp_path, demo_session
):
    named = _run("manifest", demo_session, "--no-store")
    assert named.exit_code == EXIT_ERROR
    assert "error [model-unknown]" in named.stderr
    assert "pass --window N to plan for the session's model openai:gpt-4.1-mini" in named.stderr
    bare = tmp_path / "bare.jsonl"
    header = {"type": "session", "version": 3, "id": "bare", "timestamp": "2026-01-01T00:00:00.000Z"}
    message = {
        "type": "message", "id": "a1", "parentId": None, "timestamp": "2026-01-01T00:00:01.000Z",
        "message": {"role": "user", "content": "hello", "timestamp": 1},
    }  # fmt: skip
    bare.write_text(json.dumps({**header, "cwd": str(tmp_path)}) + "\n" + json.dumps(message) + "\n")
    unnamed = _run("manifest", bare, "--no-store")
    assert unnamed.exit_code == EXIT_ERROR
    assert "the session names none; pass --model provider:model --window N" in unnamed.stderr
    window_only = _run("manifest", bare, "--no-store", "--window", "8000")
    assert window_only.exit_code == EXIT_USAGE
    assert "error [model-required]" in window_only.stderr


def test_the_kept_demo_prints_commands_that_show_its_plan_again_and_restore_what_it_restored(tmp_path):
    """The first hour: the demo's next step must give the plan the demo showed, not a different one."""
    target = tmp_path / "kept dir"  # a space: the printed commands quote their paths
    demo = runner.invoke(app, ["demo", "--keep", str(target)], env={"COLUMNS": "100"})
    assert demo.exit_code == 0, demo.output
    commands = [line.strip() for line in demo.stdout.splitlines() if line.strip().startswith("ds4-context ")]
    assert [shlex.split(line)[1] for line in commands] == ["plan", "restore"]
    planned = next(line for line in demo.stdout.splitlines() if "│ planned" in line)
    again = _run(*shlex.split(commands[0])[1:])
    assert again.exit_code == 0, again.output
    assert planned.split("│")[2].strip() in again.stdout  # the same "N messages + S supplements, T tokens"
    restored = _run(*shlex.split(commands[1])[1:], "--json")
    assert restored.exit_code == 0, restored.output
    body = json.loads(restored.stdout)
    assert body["messages"]
    assert body["kind"] in {"receipt", "trimmed-tool-result"}


def test_the_deleted_demo_says_how_to_keep_it_and_what_to_pass_for_a_session():
    result = runner.invoke(app, ["demo"], env={"COLUMNS": "300"})
    assert result.exit_code == 0
    assert "ds4-context demo --keep DIR" in result.stdout
    assert (
        "ds4-context plan SESSION --window N (and --model provider:model if the session names no model)"
        in (result.stdout)
    )


def test_a_number_in_a_narrow_table_is_never_cut(tmp_path):
    """At 80 columns the compaction table cut "184,798" to "184,…": numeric columns keep their width."""
    session = tmp_path / "usage.jsonl"
    shutil.copyfile(BENCH_FIXTURES / "pi-usage-session.jsonl", session)
    listed = json.loads(_run("compaction", session, "--no-store", "--json").stdout)
    shown = runner.invoke(app, ["compaction", str(session), "--no-store"], env={"COLUMNS": "80"}).stdout
    assert len(listed["compactions"]) == 2
    for line in listed["compactions"]:
        assert f"{line['tokens_before']:,}" in shown
        assert f"{line['summary_chars']:,}" in shown


def test_a_blocked_plan_prints_the_history_it_refused_not_zero_tokens(demo_session):
    body = json.loads(_run("plan", demo_session, "--window", "100", "--no-store", "--json").stdout)
    manifest = body["manifest"]
    assert manifest["fallback"]["mode"] == "blocked"
    assert body["items"] == []
    # the same history as a plan that fits: core measures what it refused
    fits = json.loads(_run("plan", demo_session, "--window", "200000", "--no-store", "--json").stdout)
    assert manifest["native_tokens"] == fits["manifest"]["native_tokens"] > 0
    table = runner.invoke(app, ["plan", str(demo_session), "--window", "100", "--no-store"]).stdout
    history = next(line for line in table.splitlines() if "│ history" in line)
    assert f"{manifest['history_messages']} messages, {manifest['native_tokens']:,} tokens" in history


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        (["plan", "{session}", "--window", "abc"], "Invalid value for '--window'"),
        (["demo", "--window", "10"], "greater than or equal to 2048"),
        (["explain", "{session}", "--window", "40000"], "Missing argument 'message_id'"),
        (["plan", "{session}", "--windw", "40000"], "No such option: --windw"),
        (["nosuch"], "No such command 'nosuch'"),
    ],
)
def test_a_command_line_that_cannot_work_is_one_coded_line_like_every_error(demo_session, arguments, said):
    result = _run(*(str(demo_session) if part == "{session}" else part for part in arguments))
    assert result.exit_code == EXIT_USAGE
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error [usage-invalid]: ")
    assert said in lines[0]
    assert lines[0].endswith("--help)")


def test_explain_and_restore_agree_on_every_message_of_a_cut_plan(coding):
    """A message the task digest was written from is not in the plan: explain said "in plan, summary"
    while restore said "not-in-plan" for the id the plan's left-out table prints."""
    options = ["--window", "3000", "--no-store", "--json"]
    plan = json.loads(_run("plan", coding, *options).stdout)
    in_plan = {item["message_id"] for item in plan["items"] if item["original_index"] is not None}
    assert any(item["kind"] == "summary" and item["source_ids"] for item in plan["items"])
    checked = 0
    for line in coding.read_text(encoding="utf-8").splitlines()[1:]:
        entry = json.loads(line)
        if entry.get("type") != "message":
            continue
        explaining = _run("explain", coding, entry["id"], *options)
        restoring = _run("restore", coding, entry["id"], *options)
        if explaining.exit_code != 0:  # a message of another branch: both refuse it, with their codes
            assert "error [message-unknown]" in explaining.stderr
            assert restoring.exit_code == EXIT_ERROR
            assert "error [restore-unknown-id]" in restoring.stderr
            continue
        explained, restored = json.loads(explaining.stdout), json.loads(restoring.stdout)
        full_id = explained["message_id"]
        assert explained["in_plan"] is (full_id in in_plan), explained
        assert (restored["kind"] == "not-in-plan") is (not explained["in_plan"]), (explained, restored)
        checked += 1
    assert checked >= 8
