"""The /context commands over real Pi session files and a real SQLite store."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import msgspec
import pytest

from ds4_context_core import ModelDescriptor
from ds4_context_core.privacy import PrivacyPolicy
from ds4_context_engine._exceptions import CommandError
from ds4_context_engine.commands import (
    CONTEXT_COMMANDS,
    ContextWorkspace,
    context_adapter,
    context_config,
    context_excluded,
    context_explain,
    context_health,
    context_included,
    context_manifest,
    context_memory,
    context_pin,
    context_pins,
    context_privacy,
    context_rebuild_index,
    context_restore,
    context_status,
    context_storage,
    context_tokens,
    context_unpin,
    render_json,
    render_rich,
    render_text,
    run_context_command,
    run_context_command_text,
    write_demo_session,
)
from ds4_context_engine.pi import append_pi_entry, read_pi_session

FIXTURES = Path(__file__).parent / "fixtures" / "pi"
CODING_ID = "4f1c2a7e-0b5d-4a8e-9c1f-2d3e4f5a6b7c"
DEMO_MODEL = ModelDescriptor(provider="openai", id="gpt-4.1-mini", context_window=24_000, max_tokens=2_500)


@pytest.fixture
def coding(tmp_path):
    path = tmp_path / "coding.jsonl"
    shutil.copy(FIXTURES / "v3-coding.jsonl", path)
    workspace = ContextWorkspace.open(path, store_path=tmp_path / "state" / "derived.sqlite3")
    yield workspace
    workspace.close()


@pytest.fixture(scope="module")
def demo_session(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo")
    return write_demo_session(root / "sessions" / "demo.jsonl", cwd=str(root))


@pytest.fixture
def demo(demo_session, tmp_path):
    path = tmp_path / "demo.jsonl"
    shutil.copy(demo_session, path)
    workspace = ContextWorkspace.open(path, no_store=True, model=DEMO_MODEL)
    yield workspace
    workspace.close()


def test_status_summarises_the_session_without_content(coding):
    status = context_status(coding)
    assert (status.session_id, status.format_version, status.entries, status.context_messages) == (
        CODING_ID,
        3,
        16,
        10,
    )
    assert (status.provider, status.model_id, status.thinking_level) == (
        "anthropic",
        "claude-sonnet-4-5",
        "medium",
    )
    assert (status.leaf_id, status.branch_entries, status.store_mode, status.issues) == (
        "a0000010",
        16,
        "file",
        (),
    )
    rendered = render_text(status) + render_json(status)
    assert "Fix the failing parser" not in rendered
    assert "parse.ts" not in rendered


def test_status_and_health_report_damaged_sessions_by_code(tmp_path):
    path = tmp_path / "corrupt.jsonl"
    shutil.copy(FIXTURES / "corrupt.jsonl", path)
    with ContextWorkspace.open(path, no_store=True) as workspace:
        counts = {issue.code: issue.count for issue in context_status(workspace).issues}
        assert counts == {
            "pi-entry-id-duplicate": 1,
            "pi-entry-invalid": 1,
            "pi-line-corrupt": 2,
            "pi-line-partial": 1,
            "pi-message-role-unknown": 1,
            "pi-parent-dangling": 1,
        }
        assert context_health(workspace).ok is False


def test_health_is_ok_for_a_clean_session(coding):
    health = context_health(coding)
    assert health.ok
    assert health.store is not None
    assert health.store.migration_checksums_ok


def test_pin_and_unpin_append_custom_entries_and_never_rewrite(coding):
    path = coding.session_path
    before = path.read_bytes()
    pinned = context_pin(coding, "a0000003", label="the task")
    assert [(pin.entry_id, pin.label, pin.in_context) for pin in pinned.pins] == [
        ("a0000003", "the task", True)
    ]
    after = path.read_bytes()
    assert after.startswith(before)
    event = read_pi_session(path).entry(pinned.event_entry_id)
    assert event.type == "custom"
    assert event.data["customType"] == "ds4-context.pin"
    assert [m.source_entry_id for m in coding.context.messages if m.flags.pinned] == ["a0000003"]
    unpinned = context_unpin(coding, "a0000003")
    assert unpinned.pins == ()
    assert path.read_bytes().startswith(after)
    assert context_pins(coding).pins == ()


@pytest.mark.parametrize(
    ("action", "code"),
    [
        (lambda ws: context_pin(ws, "ffffffff"), "pin-target-unknown"),
        (lambda ws: context_unpin(ws, "a0000003"), "pin-not-found"),
        (lambda ws: context_memory(ws, add="   "), "memory-text-empty"),
        (lambda ws: context_memory(ws, remove="nope"), "memory-item-unknown"),
        (lambda ws: context_memory(ws, add="x", remove="y"), "command-argument-invalid"),
        (context_manifest, "model-unknown"),
        (lambda ws: run_context_command(ws, "frobnicate"), "command-unknown"),
        (lambda ws: run_context_command(ws, "status now"), "command-argument-invalid"),
        (lambda ws: run_context_command(ws, "explain"), "command-argument-invalid"),
        (lambda ws: run_context_command(ws, 'pin "a0000003'), "command-argument-invalid"),
        (lambda ws: run_context_command(ws, "memory forget"), "command-argument-invalid"),
    ],
)
def test_bad_commands_raise_coded_errors_and_leave_the_session_alone(coding, action, code):
    before = coding.session_path.read_bytes()
    with pytest.raises(CommandError) as caught:
        action(coding)
    assert caught.value.code == code
    assert coding.session_path.read_bytes() == before


def test_memory_items_are_added_and_removed_through_session_events(coding):
    added = context_memory(coding, add="Project uses vitest, not jest")
    (item,) = added.items
    assert (item.chars, item.preview) == (29, "Project uses vitest, not jest")
    assert added.event_entry_id is not None
    removed = context_memory(coding, remove=item.item_id)
    assert removed.items == ()
    assert len(read_pi_session(coding.session_path).entries) == 18


def test_slash_command_text_parses_arguments_and_renders_errors(coding):
    result = run_context_command(coding, "/context pin a0000003 keep this")
    assert result.pins[0].label == "keep this"
    assert run_context_command(coding, "").command == "status"
    text = run_context_command_text(coding, "/context nope")
    assert text.startswith("/context error [command-unknown]")
    assert sorted(CONTEXT_COMMANDS) == list(CONTEXT_COMMANDS)
    assert len(CONTEXT_COMMANDS) == 23


def test_tokens_are_grouped_by_role_and_largest_first(coding):
    tokens = context_tokens(coding)
    assert tokens.estimator == "chars-v1"
    assert tokens.messages == 10
    assert set(tokens.by_role) == {"assistant", "custom", "tool", "user"}
    assert tokens.total_tokens == sum(tokens.by_role.values())
    sizes = [item.tokens for item in tokens.largest]
    assert sizes == sorted(sizes, reverse=True)
    # the screenshot message carries an image: at least the 1024-token image charge
    assert tokens.largest[0].message_id == f"{CODING_ID}:a0000009"
    assert tokens.largest[0].tokens >= 1024


def test_adapter_command_lists_negotiated_capabilities(coding):
    result = context_adapter(coding)
    assert result.contract_version == "runtime-adapter-v1"
    assert (result.enabled, result.disabled) == (2, 2)
    assert [(line.id, line.enabled) for line in result.capabilities] == [
        ("compaction", True),
        ("provider-continuation", True),
        ("embeddings", False),
        ("local-kv-reuse", False),
    ]
    text = render_text(result).splitlines()
    assert "  compaction: supported (pi-session-compact-v1); enabled" in text
    assert "  provider-continuation: supported (pi-openai-responses-continuation-v1); enabled" in text
    disabled = [line for line in text if line.startswith(("  embeddings: ", "  local-kv-reuse: "))]
    assert len(disabled) == 2
    assert all(": unavailable (" in line and line.endswith("); disabled safely") for line in disabled)


def test_privacy_reports_counts_and_never_the_secret(tmp_path):
    path = tmp_path / "secret.jsonl"
    lines = (
        (FIXTURES / "v3-coding.jsonl")
        .read_text()
        .replace(
            "Fix the failing parser test in src/parse.ts",
            "Use key sk-abcdefQ7mW2xLp9Zr4Kd8Nc3vT1Bb5 to deploy",
        )
    )
    path.write_text(lines)
    with ContextWorkspace.open(path, no_store=True) as workspace:
        result = context_privacy(workspace)
    assert (result.provider, result.destination, result.changed) == ("anthropic", "remote", True)
    assert result.secret_redactions >= 1
    assert "sk-abcdef" not in render_json(result)


def test_the_privacy_policy_comes_from_the_config_unless_one_is_given(tmp_path):
    path = tmp_path / "secret.jsonl"
    path.write_text(
        (FIXTURES / "v3-coding.jsonl")
        .read_text()
        .replace("Fix the failing parser test in src/parse.ts", "Use key sk-abcdefQ7mW2xLp9Zr4Kd8Nc3vT1Bb5")
    )
    local = {"privacy": {"local_providers": ["Anthropic"]}}
    with ContextWorkspace.open(path, no_store=True, config=local) as workspace:
        assert workspace.privacy_policy == PrivacyPolicy(local_providers=("Anthropic",))
        result = context_privacy(workspace)
    assert (result.destination, result.secret_redactions) == ("local", 0)
    # an invalid section never widens the policy: the defaults stay, with a warning
    invalid = {"privacy": {"remote_allowed": ["normal", "local-only"]}}
    with ContextWorkspace.open(path, no_store=True, config=invalid) as workspace:
        assert workspace.privacy_policy == PrivacyPolicy()
        assert workspace.config_result.warnings
    explicit = PrivacyPolicy(redact_secrets=False)
    with ContextWorkspace.open(path, no_store=True, config=local, privacy_policy=explicit) as workspace:
        result = context_privacy(workspace)
    assert (result.destination, result.secret_redactions) == ("remote", 0)


def test_plan_commands_explain_what_is_kept_trimmed_receipted_and_left_out(demo):
    manifest = context_manifest(demo)
    assert manifest.model == "openai:gpt-4.1-mini"
    assert manifest.planned_tokens <= manifest.hard_limit < manifest.native_tokens
    assert manifest.fallback is None
    included = context_included(demo)
    kinds = {item.kind for item in included.items}
    assert {"current-request", "message"} <= kinds
    assert included.total_tokens == manifest.planned_tokens
    excluded = context_excluded(demo)
    assert excluded.exclusions
    assert all(line.reason for line in excluded.exclusions)
    first = demo.context.messages[0]
    explanation = context_explain(demo, first.source_entry_id)
    assert explanation.message_id == first.id
    assert explanation.reason
    last = context_explain(demo, demo.context.messages[-1].id)
    assert (last.in_plan, last.kind) == (True, "current-request")
    with pytest.raises(CommandError) as unknown:
        context_explain(demo, "ffffffff")
    assert unknown.value.code == "message-unknown"


def test_restore_gives_back_the_untrimmed_original_of_a_trimmed_result(demo):
    plan = demo.plan()
    trimmed = [item for item in plan.items if item.kind == "trimmed-tool-result"]
    assert trimmed, "the demo session is built so that old tool results get trimmed at 24k tokens"
    target = trimmed[0].message_id
    restored = context_restore(demo, target)
    (original,) = restored.messages
    assert original.message_id == target
    session_entry = read_pi_session(demo.session_path).entry(target.rsplit(":", 1)[1])
    full_text = session_entry.data["message"]["content"][0]["text"]
    assert full_text[:3000] in original.text
    planned = next(message for message in plan.messages if message.id == target)
    assert len(planned.blocks[0].content) < len(full_text)
    assert all(len(message.text) <= 4000 for message in restored.messages)
    with pytest.raises(CommandError) as caught:
        context_restore(demo, "no-such-receipt:x")
    assert caught.value.code == "restore-unknown-id"


def test_restore_of_a_receipt_names_its_originals(demo_session, tmp_path):
    # The demo is sized for a receipt with core's compaction cutting no deeper than the soft limit (by
    # default it cuts to a low-water mark, past the steps it would receipt).
    path = tmp_path / "demo.jsonl"
    shutil.copy(demo_session, path)
    shallow = {"planner": {"compaction_low_water_ratio": 1.0}}
    with ContextWorkspace.open(path, no_store=True, model=DEMO_MODEL, config=shallow) as demo:
        _check_receipt_restore(demo)


def _check_receipt_restore(demo):
    plan = demo.plan()
    if not plan.manifest.receipts:
        pytest.skip("the planner made no layer-2 receipt for the demo session at this window")
    record = plan.manifest.receipts[0]
    restored = context_restore(demo, record.receipt_id)
    assert tuple(message.message_id for message in restored.messages) == record.original_message_ids
    assert context_explain(demo, record.original_message_ids[0]).receipt_id == record.receipt_id


def test_plans_are_recorded_as_manifests_and_storage_counts_them(tmp_path, demo_session):
    path = tmp_path / "demo.jsonl"
    shutil.copy(demo_session, path)
    with ContextWorkspace.open(path, store_path=tmp_path / "db.sqlite3", model=DEMO_MODEL) as workspace:
        context_manifest(workspace)
        storage = context_storage(workspace).storage
        assert (storage.sessions, storage.manifests) == (1, 1)
        stored = workspace.store.manifests(workspace.session.session_id)[0]
        assert json.loads(stored.body)["contractVersion"] == "ds4-context-plan-v1"


def test_rebuild_index_replays_the_session(coding):
    context_pin(coding, "a0000003")
    report = context_rebuild_index(coding).report
    assert (report.mode, report.entries_indexed) == ("full", 17)
    assert [pin.entry_id for pin in context_pins(coding).pins] == ["a0000003"]


def test_config_shows_defaults_and_warns_on_unknown_keys(tmp_path):
    path = tmp_path / "s.jsonl"
    shutil.copy(FIXTURES / "v3-coding.jsonl", path)
    with ContextWorkspace.open(
        path, no_store=True, config={"budget": {"hard_limit_ratio": 7}, "bogus": 1}
    ) as ws:
        result = context_config(ws)
    assert result.schema == "ds4-context-config-v1"
    assert result.config["budget"]["hard_limit_ratio"] == 0.9
    assert len(result.warnings) == 2


def test_every_result_renders_as_text_rich_and_json(coding, demo):
    results = [
        context_status(coding),
        context_tokens(coding),
        context_adapter(coding),
        context_manifest(demo),
    ]
    for result in results:
        text = render_text(result)
        assert text.startswith(f"/context {result.command}")
        assert render_rich(result) is not None
        assert msgspec.json.decode(render_json(result))["command"] == result.command


def test_memory_previews_mask_secrets_and_work_without_a_store(tmp_path):
    path = tmp_path / "s.jsonl"
    shutil.copy(FIXTURES / "v3-coding.jsonl", path)
    with ContextWorkspace.open(path, no_store=True) as workspace:
        result = context_memory(workspace, add="deploy with sk-abcdefQ7mW2xLp9Zr4Kd8Nc3vT1Bb5 tonight")
        assert "sk-abcdef" not in result.items[0].preview
        assert result.items[0].chars == 53  # 12 + 33 + 8 characters
        assert context_status(workspace).store_mode == "none"
        assert context_status(workspace).memory_items == 1
        with pytest.raises(CommandError) as caught:
            context_storage(workspace)
        assert caught.value.code == "command-needs-store"


def test_a_growing_session_is_replanned_and_an_unchanged_one_is_not(demo):
    first = demo.plan()
    assert demo.plan() is first
    entry = append_pi_entry(
        demo.session_path, "message", {"message": {"role": "user", "content": "Also log it.", "timestamp": 1}}
    )
    demo.refresh()
    second = demo.plan()
    assert second is not first
    assert second.messages[-1].id == f"{demo.session.session_id}:{entry.id}"
    assert second.items[-1].kind == "current-request"
