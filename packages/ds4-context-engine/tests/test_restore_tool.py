"""The model-facing restore tool: its spec, and what its handler gives back for a real Pi session."""

from __future__ import annotations

import pytest

from ds4_context_core import ModelDescriptor
from ds4_context_engine.commands import (
    DEMO_MODEL_ID,
    DEMO_PROVIDER,
    RESTORE_TOOL_MAX_CHARS,
    RESTORE_TOOL_NAME,
    ContextWorkspace,
    handle_restore_tool_call,
    offer_restore_tool,
    restore_tool_definition,
    write_demo_session,
)
from ds4_context_engine.pi import read_pi_session

DEMO_MODEL = ModelDescriptor(
    provider=DEMO_PROVIDER, id=DEMO_MODEL_ID, context_window=24_000, max_tokens=4_000
)


@pytest.fixture
def offered(tmp_path):
    path = write_demo_session(tmp_path / "sessions" / "demo.jsonl", cwd=str(tmp_path))
    workspace = ContextWorkspace.open(path, no_store=True, model=DEMO_MODEL, config=offer_restore_tool(None))
    yield workspace
    workspace.close()


def test_the_spec_asks_for_one_id_string():
    spec = restore_tool_definition()
    assert spec.name == RESTORE_TOOL_NAME == "ds4_restore"
    assert spec.parameters["required"] == ["id"]
    assert spec.parameters["properties"]["id"]["type"] == "string"
    assert spec.parameters["additionalProperties"] is False


def test_offering_the_tool_keeps_the_rest_of_the_config():
    settings = offer_restore_tool({"pruning": {"head_chars": 300}, "planner": {"task_digest": True}})
    assert settings["pruning"] == {"head_chars": 300, "restore_tool": "ds4_restore"}
    assert settings["planner"] == {"task_digest": True}


def test_a_trim_marker_names_the_tool_and_the_handler_gives_the_original_back(offered):
    plan = offered.plan()
    trimmed = [item for item in plan.items if item.kind == "trimmed-tool-result"]
    assert trimmed, "the demo session is built so that old tool results get trimmed at 24k tokens"
    target = trimmed[0].message_id
    planned = next(message for message in plan.messages if message.id == target)
    assert f'call ds4_restore with id "{target}"' in planned.blocks[0].content
    output = handle_restore_tool_call(offered, {"id": target})
    assert not output.is_error
    entry = read_pi_session(offered.session_path).entry(target.rsplit(":", 1)[1])
    original = entry.data["message"]["content"][0]["text"]
    assert original[:3000] in output.text
    assert len(output.text) <= RESTORE_TOOL_MAX_CHARS + 200


@pytest.mark.parametrize(
    "arguments", [None, [], {}, {"id": 5}, {"id": ""}, {"id": "x" * 300}, {"id": "a", "b": 1}]
)
def test_bad_arguments_give_an_error_result_with_a_code(offered, arguments):
    output = handle_restore_tool_call(offered, arguments)
    assert output.is_error
    assert output.code == "restore-tool-arguments-invalid"


def test_an_unknown_id_gives_an_error_result_not_an_exception(offered):
    output = handle_restore_tool_call(offered, {"id": "ds4-receipt:0000000000000000"})
    assert (output.is_error, output.code) == (True, "restore-unknown-id")
    assert "0000000000000000" not in output.text  # no echo of what the model sent


def test_without_the_tool_offered_markers_name_no_id(tmp_path):
    path = write_demo_session(tmp_path / "demo.jsonl", cwd=str(tmp_path))
    with ContextWorkspace.open(path, no_store=True, model=DEMO_MODEL) as workspace:
        plan = workspace.plan()
        for item, message in zip(plan.items, plan.messages, strict=True):
            if item.kind == "trimmed-tool-result":
                assert message.id not in message.blocks[0].content
                assert RESTORE_TOOL_NAME not in message.blocks[0].content
