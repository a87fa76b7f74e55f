"""A turn with the managed tools (Read, Write, Bash) against a scripted model on 127.0.0.1.

Bash runs through the real bubblewrap engine; a path outside the workspace and Bash without a usable
sandbox engine come back to the model as coded errors, and the lifecycle trail records every call.
"""

import json
import os

import anyio
import pytest
from _model_servers import Answer, ModelServer, transport_for

from ds4_context_engine.runtime import (
    BubblewrapEngine,
    JsonlToolLifecycleStore,
    RunOptions,
    ToolLifecycleSink,
    create_runtime,
)

ENGINE = BubblewrapEngine()


@pytest.fixture
def needs_bwrap():
    if ENGINE.available():
        return
    reason = ENGINE.unavailable_reason()
    if os.environ.get("CI"):
        pytest.fail(f"CI must provide bubblewrap for the Bash tool tests: {reason}")
    pytest.skip(f"bubblewrap cannot run here: {reason}")


def _run(server, tmp_path, workspace, engine, sink_path):
    async def main():
        runtime = create_runtime(
            workspace=workspace,
            sandbox_engine=engine,
            tool_lifecycle_sink=ToolLifecycleSink(JsonlToolLifecycleStore(sink_path)),
            transports={"openai": transport_for("openai-chat", server.url)},
        )
        async with runtime:
            return await runtime.run(
                "You edit files.",
                RunOptions(
                    model="openai:scripted",
                    messages=[{"role": "user", "content": "update notes.txt and count its lines"}],
                    session_path=tmp_path / "session.jsonl",
                ),
            )

    return anyio.run(main)


def test_read_write_and_bash_end_to_end(tmp_path, needs_bwrap):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("alpha\nbeta\n")
    outside = tmp_path / "secret.txt"
    outside.write_text("not yours")

    def brain(view, number):
        if number == 1:
            return Answer(
                calls=[
                    ("r1", "Read", json.dumps({"path": "notes.txt"})),
                    ("r2", "Read", json.dumps({"path": str(outside)})),
                ]
            )
        if number == 2:
            return Answer(
                calls=[("w1", "Write", json.dumps({"path": "notes.txt", "content": "alpha\nbeta\ngamma\n"}))]
            )
        if number == 3:
            return Answer(calls=[("b1", "Bash", json.dumps({"command": "wc -l < notes.txt"}))])
        return Answer(text="notes.txt has " + view.tool_results["b1"].strip().split()[0] + " lines")

    sink_path = tmp_path / "trail.jsonl"
    with ModelServer("openai-chat", brain) as server:
        result = _run(server, tmp_path, workspace, ENGINE, sink_path)
    assert result.error is None, result.error_detail
    first = server.seen[0]
    assert sorted(first.tool_names) == ["Bash", "Edit", "Glob", "Grep", "Read", "Write"]
    second = server.seen[1]
    assert "alpha" in second.tool_results["r1"]
    assert "beta" in second.tool_results["r1"]
    assert "not yours" not in second.raw.decode()
    records = {record.call_id: record for record in result.tool_records}
    assert records["r1"].state == "success"
    assert records["r2"].is_error
    assert records["r2"].code.startswith("sandbox-")
    assert (workspace / "notes.txt").read_text() == "alpha\nbeta\ngamma\n"
    assert records["b1"].state == "success"
    assert result.text == "notes.txt has 3 lines"
    lines = [json.loads(line) for line in sink_path.read_text().splitlines()]
    for call in ("r1", "r2", "w1", "b1"):
        assert [line["phase"] for line in lines if line["toolCallId"] == call] == ["invocation", "result"]


def test_bash_without_a_usable_sandbox_engine_is_refused_and_nothing_runs(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    marker = workspace / "ran"

    def brain(view, number):
        if number == 1:
            return Answer(calls=[("b1", "Bash", json.dumps({"command": f"touch {marker}"}))])
        return Answer(text="done")

    with ModelServer("openai-chat", brain) as server:
        result = _run(
            server, tmp_path, workspace, BubblewrapEngine("/nonexistent/bin/bwrap"), tmp_path / "t.jsonl"
        )
    assert result.error is None
    (record,) = result.tool_records
    assert record.is_error
    assert record.state == "rejected"
    assert record.code.startswith("sandbox-")
    assert not marker.exists()
    assert server.seen[1].tool_results["b1"]
