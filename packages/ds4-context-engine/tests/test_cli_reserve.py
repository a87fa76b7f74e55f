"""The CLI reserves for the answer what the library does: one default for every host."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from ds4_context_core import ModelDescriptor
from ds4_context_core.planner import plan_context
from ds4_context_engine.cli import app
from ds4_context_engine.commands import ContextWorkspace, write_demo_session

runner = CliRunner()


@pytest.fixture(scope="module")
def demo_session(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo")
    return write_demo_session(root / "sessions" / "demo.jsonl", cwd=str(root))


@pytest.mark.parametrize("window", [4_096, 8_192, 32_768, 200_000])
def test_the_cli_default_reserve_is_the_library_default(demo_session, window):
    result = runner.invoke(
        app,
        [
            "plan",
            str(demo_session),
            "--model",
            "anthropic:claude-x",
            "--window",
            str(window),
            "--no-store",
            "--json",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    budget = json.loads(result.output)["budget"]
    descriptor = ModelDescriptor(provider="anthropic", id="claude-x", context_window=window)
    with ContextWorkspace.open(demo_session, no_store=True, model=descriptor) as workspace:
        library = plan_context(workspace.context.messages, model=descriptor).budget
    assert budget["output_reserve"] == library.output_reserve
    assert budget["calibration_source"] == "prior"
    assert budget["calibration_ratio"] == library.calibration_ratio


def test_max_tokens_caps_the_cli_reserve(demo_session):
    result = runner.invoke(
        app,
        [
            "plan",
            str(demo_session),
            "--model",
            "openai:gpt-x",
            "--window",
            "128000",
            "--max-tokens",
            "4000",
            "--no-store",
            "--json",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["budget"]["output_reserve"] == 4_000
