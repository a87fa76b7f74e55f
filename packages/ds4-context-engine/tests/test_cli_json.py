"""Every ``ds4-context ... --json`` output validates against its documented JSON Schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from typer.testing import CliRunner

from ds4_context_engine._cli_json import command_output_types, json_schema, write_schemas
from ds4_context_engine.cli import app
from ds4_context_engine.commands import write_demo_session

SCHEMAS = Path(__file__).resolve().parents[3] / "docs" / "engine" / "json-schemas"
runner = CliRunner()


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli-json")
    return write_demo_session(root / "demo.jsonl", cwd=str(root))


def _json(*args) -> dict:
    result = runner.invoke(app, [str(arg) for arg in args], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def _validate(body: dict) -> None:
    schema = json.loads((SCHEMAS / f"{body['command']}.schema.json").read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    errors = sorted(Draft202012Validator(schema).iter_errors(body), key=lambda error: list(error.path))
    assert [f"{list(error.path)}: {error.message[:200]}" for error in errors] == []


def test_the_documented_schemas_are_the_ones_the_outputs_are_typed_by(tmp_path):
    written = {path.name: path.read_text(encoding="utf-8") for path in write_schemas(tmp_path)}
    documented = {path.name: path.read_text(encoding="utf-8") for path in SCHEMAS.glob("*.schema.json")}
    # regenerate with: python -m ds4_context_engine._cli_json docs/engine/json-schemas
    assert documented == written


def test_schemas_require_every_field_and_refuse_unknown_ones():
    schema = json_schema("plan", command_output_types()["plan"])
    assert schema["required"] == ["budget", "command", "items", "manifest", "model"]
    manifest = schema["$defs"]["PlanManifest"]
    assert "receipts" in manifest["required"]
    assert manifest["additionalProperties"] is False
    assert all(key == key.lower() for key in manifest["properties"])  # snake_case, never camelCase


READ_COMMANDS = (
    "status", "adapter", "tokens", "pins", "privacy", "model", "summaries", "compaction", "artifacts",
    "storage", "health", "config", "manifest", "included", "excluded", "compact-preview", "retrieved",
)  # fmt: skip


@pytest.mark.parametrize("command", READ_COMMANDS)
def test_read_command_outputs_validate(session, tmp_path, command):
    body = _json(command, session, "--store", tmp_path / "d.sqlite3", "--window", "20000", "--json")
    assert body["command"] == command
    _validate(body)


def test_plan_index_restore_explain_and_changes_validate(session, tmp_path):
    store = ["--store", tmp_path / "d.sqlite3"]
    # The demo is sized for a receipt with core's compaction cutting no deeper than the soft limit and
    # without core's task digest (by default it cuts to a low-water mark, past the receipted steps).
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps({"planner": {"compaction_low_water_ratio": 1.0, "task_digest": False}}), encoding="utf-8"
    )
    planning = [*store, "--config", config]
    plan = _json("plan", session, *planning, "--window", "20000", "--json")
    _validate(plan)
    assert plan["manifest"]["receipts"]
    receipt = plan["manifest"]["receipts"][0]["receipt_id"]
    assert receipt in {item["message_id"] for item in plan["items"] if item["kind"] == "receipt"}
    for command in ("restore", "explain"):
        _validate(_json(command, session, receipt, *planning, "--window", "20000", "--json"))
    _validate(_json("index", session, *store, "--json"))
    _validate(_json("rebuild-index", session, *store, "--json"))
    entry = plan["items"][-1]["message_id"].rsplit(":", 1)[1]
    _validate(_json("pin", session, entry, *store, "--json"))
    _validate(_json("unpin", session, entry, *store, "--json"))
    _validate(_json("memory", session, "--add", "uses vitest", *store, "--json"))


def test_a_plan_without_receipts_keeps_an_empty_list(session):
    plan = _json("plan", session, "--no-store", "--window", "24000", "--json")
    _validate(plan)
    assert plan["manifest"]["receipts"] == []


def test_conformance_and_demo_outputs_validate():
    _validate(_json("conformance", "--json"))
    _validate(_json("demo", "--json"))


TABLE_COMMANDS = (*READ_COMMANDS, "plan")


@pytest.mark.parametrize("command", TABLE_COMMANDS)
def test_every_table_is_readable_at_80_columns(session, tmp_path, command):
    """Nothing cut at 80 columns: no line wider, no cell ending in '…', and every item id (the part
    that differs between rows) on one line of the table, as restore and explain take it."""
    options = [str(session), "--store", str(tmp_path / "d.sqlite3"), "--window", "20000"]
    body = _json(command, *options, "--json")
    shown = runner.invoke(app, [command, *options], env={"COLUMNS": "80"})
    assert shown.exit_code == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines
    assert max(len(line) for line in lines) <= 80
    assert not [line for line in lines if "…" in line]
    prefix = f"{_session_id(session)}:"
    if command == "plan":  # its tables count items by kind; they name receipts and the left-out ranges
        named = [record["receipt_id"] for record in body["manifest"]["receipts"]]
        for exclusion in body["manifest"]["exclusions"]:
            named += [exclusion["first_message_id"], exclusion["last_message_id"]]
    else:
        named = [item["message_id"] for item in body.get("items", [])]
    for message_id in named:
        if message_id.startswith((prefix, "ds4-receipt:")):
            assert message_id.rpartition(":")[2] in shown.stdout, message_id


def _session_id(session):
    return json.loads(session.read_text(encoding="utf-8").splitlines()[0])["id"]
