"""Bad models, bad transports and bad timing: each ends as a tool result with a code or a clean coded stop.

Everything runs against real HTTP servers on 127.0.0.1; the assertions read what the provider received
and what was written to the Pi session and the lifecycle store.
"""

import json

import anyio
import pytest
from _model_servers import Answer, Cut, Fail, Hang, ModelServer, transport_for

from ds4_context_core.history import build_runtime_history_snapshot, validate_runtime_history_snapshot
from ds4_context_engine.pi import build_pi_context, read_pi_session
from ds4_context_engine.runtime import (
    REMOVED_RUN_OPTIONS,
    HostTool,
    JsonlToolLifecycleStore,
    LiveInput,
    RunOptions,
    ToolLifecycleSink,
    create_runtime,
)


async def no_sleep(seconds):
    await anyio.sleep(0)


def echo(arguments, context):
    return f"echo {arguments.get('n')}"


ECHO = HostTool(
    name="echo", function=echo, parameters={"type": "object", "properties": {"n": {"type": "integer"}}}
)
SHELL = HostTool(name="shell", function=lambda arguments, context: "ran")


def _orphans(view):
    return [call for call in view.tool_calls if call not in view.tool_results]


def _turn(server, options, *, tmp_path, tools=(ECHO, SHELL), sink=None, transports=None, **runtime_kwargs):
    async def main():
        runtime = create_runtime(
            workspace=tmp_path,
            tools=list(tools),
            managed_tools=False,
            transports=transports or {"openai": transport_for(server.wire, server.url)},
            tool_lifecycle_sink=sink,
            sleep=no_sleep,
            **runtime_kwargs,
        )
        async with runtime:
            return await runtime.run("system", options)

    return anyio.run(main)


def _options(**kwargs):
    kwargs.setdefault("model", "openai:scripted-1")
    kwargs.setdefault("messages", [{"role": "user", "content": "go"}])
    return RunOptions(**kwargs)


def test_unknown_tools_broken_json_and_disallowed_tools_are_answered_with_coded_errors(tmp_path):
    def brain(view, number):
        if number == 1:
            return Answer(
                calls=[
                    ("c1", "nope", "{}"),
                    ("c2", "echo", '{"n": 1'),  # cut JSON
                    ("c3", "shell", "{}"),  # offered to nobody: disallowed
                    ("c4", "echo", '{"n": 2}'),
                ]
            )
        return Answer(text="done")

    with ModelServer("openai-chat", brain) as server:
        result = _turn(server, _options(disallowed_tools=["shell"]), tmp_path=tmp_path)
    assert result.error is None
    codes = {record.call_id: (record.code, record.state) for record in result.tool_records}
    assert codes == {
        "c1": ("tool-unknown", "rejected"),
        "c2": ("tool-arguments-invalid", "rejected"),
        "c3": ("tool-not-allowed", "rejected"),
        "c4": (None, "success"),
    }
    first, second = server.seen
    assert first.tool_names == ["echo"]  # shell was never offered
    assert _orphans(second) == []
    assert "no tool named nope" in second.tool_results["c1"]
    assert "not a JSON object" in second.tool_results["c2"]
    assert second.tool_results["c4"] == "echo 2"


def test_a_model_looping_on_the_same_call_is_stopped_with_a_code_and_every_call_answered(tmp_path):
    session = tmp_path / "s.jsonl"
    with ModelServer(
        "openai-chat", lambda view, number: Answer(calls=[(f"c{number}", "echo", '{"n": 7}')])
    ) as server:
        result = _turn(server, _options(session_path=session, max_repeated_steps=3), tmp_path=tmp_path)
    assert result.error == "run-tool-loop"
    assert len(server.seen) == 4  # three identical steps ran, the fourth was refused
    assert result.tool_records[-1].code == "tool-call-repeated"
    messages = build_pi_context(read_pi_session(session)).messages
    calls = {i for m in messages for i in m.tool_call_ids}
    results = {i for m in messages for i in m.tool_result_ids}
    assert calls == results
    assert len(calls) == 4


def test_max_steps_stops_with_a_code_and_a_valid_transcript(tmp_path):
    with ModelServer(
        "anthropic", lambda view, number: Answer(calls=[(f"t{number}", "echo", json.dumps({"n": number}))])
    ) as server:
        transports = {"anthropic": transport_for("anthropic", server.url)}
        result = _turn(
            server,
            _options(model="anthropic:scripted", max_steps=3),
            tmp_path=tmp_path,
            transports=transports,
        )
    assert result.error == "run-max-steps"
    assert len(result.steps) == 3
    assert len(result.tool_records) == 3
    assert _orphans(server.seen[-1]) == []


@pytest.mark.parametrize("wire", ["openai-chat", "openai-responses", "anthropic"])
def test_rate_limits_server_errors_and_cut_streams_are_retried_and_the_turn_is_not_lost(wire, tmp_path):
    script = [Fail(429, {"retry-after-ms": "5"}), Cut(), Fail(500)]

    def brain(view, number):
        if script:
            return script.pop(0)
        if not view.tool_results:
            return Answer(calls=[("c1", "echo", '{"n": 3}')])
        return Answer(text="recovered")

    provider = "anthropic" if wire == "anthropic" else "openai"
    with ModelServer(wire, brain) as server:
        result = _turn(
            server,
            _options(model=None, fallback_chain=[{"model": f"{provider}:scripted", "attempts": 4}]),
            tmp_path=tmp_path,
            transports={provider: transport_for(wire, server.url)},
        )
    assert result.error is None, result.error_detail
    assert result.text == "recovered"
    assert [record.kind for record in result.failovers] == [
        "rate-limited",
        "connection-error",
        "server-error",
    ]
    assert result.steps[0].attempts == 4
    # every attempt sent the same user turn: nothing was lost to the failures
    assert {tuple(view.user_texts) for view in server.seen} == {("go",)}


def test_a_failing_route_fails_over_to_the_next_provider(tmp_path):
    with (
        ModelServer("openai-chat", lambda view, number: Fail(503)) as down,
        ModelServer("anthropic", lambda view, number: Answer(text="from anthropic")) as up,
    ):
        transports = {
            "openai": transport_for("openai-chat", down.url),
            "anthropic": transport_for("anthropic", up.url),
        }
        result = _turn(
            down,
            _options(model=None, fallback_chain=["openai:gpt-x", "anthropic:claude-x"]),
            tmp_path=tmp_path,
            transports=transports,
        )
    assert result.text == "from anthropic"
    assert result.steps[0].model == "anthropic:claude-x"
    assert [(record.model, record.http_status) for record in result.failovers] == [("openai:gpt-x", 503)]


def test_a_hanging_transport_is_cut_at_the_attempt_deadline(tmp_path):
    with ModelServer("openai-chat", lambda view, number: Hang(3)) as server:
        result = _turn(server, _options(attempt_timeout_s=0.3), tmp_path=tmp_path)
    assert result.error == "run-provider-failed"
    assert result.error_detail.startswith("timeout")
    assert [record.kind for record in result.failovers] == ["timeout"]


def test_a_client_error_stops_the_turn_with_a_code(tmp_path):
    with ModelServer("openai-chat", lambda view, number: Fail(400)) as server:
        result = _turn(server, _options(), tmp_path=tmp_path)
    assert result.error == "run-provider-failed"
    assert result.failovers == ()  # a 400 would fail again: not retried
    assert result.messages[0].role == "user"


def test_cancelling_in_the_middle_of_a_tool_leaves_a_valid_session_and_a_consistent_trail(tmp_path):
    session = tmp_path / "s.jsonl"
    sink_path = tmp_path / "trail.jsonl"
    cancel = anyio.Event()
    started = anyio.Event()

    async def slow(arguments, context):
        started.set()
        await anyio.sleep(30)
        return "never"

    def quick(arguments, context):
        cancel.set()  # the host cancels while the slow call runs
        return "quick"

    tools = [
        HostTool(name="slow", function=slow, read_only=True, concurrency="parallel-safe"),
        HostTool(name="quick", function=quick),
    ]

    def brain(view, number):
        return Answer(calls=[("a", "slow", "{}"), ("b", "quick", "{}"), ("c", "slow", "{}")])

    async def main():
        runtime = create_runtime(
            workspace=tmp_path,
            tools=tools,
            managed_tools=False,
            transports={"openai": transport_for("openai-chat", server.url)},
            tool_lifecycle_sink=ToolLifecycleSink(JsonlToolLifecycleStore(sink_path)),
        )

        async def cancel_when_started():
            await started.wait()
            cancel.set()

        async with runtime, anyio.create_task_group() as group:
            group.start_soon(cancel_when_started)
            with anyio.fail_after(10):
                return await runtime.run(
                    "s", _options(session_path=session, cancel=cancel, tool_execution_mode="sequential")
                )

    with ModelServer("openai-chat", brain) as server:
        result = anyio.run(main)
    assert result.error == "run-cancelled"
    assert [(r.call_id, r.state) for r in result.tool_records] == [
        ("a", "cancelled"),
        ("b", "cancelled"),
        ("c", "cancelled"),
    ]
    # the session is valid: every call has its result, and it reads back as a valid snapshot
    context = build_pi_context(read_pi_session(session))
    snapshot = build_runtime_history_snapshot(
        runtime_id="pi",
        session_id=context.session_id,
        revision="r1",
        project_root=str(tmp_path),
        messages=context.messages,
    )
    assert validate_runtime_history_snapshot(snapshot) == ()
    calls = {i for m in snapshot.messages for i in m.tool_call_ids}
    assert calls == {i for m in snapshot.messages for i in m.tool_result_ids} == {"a", "b", "c"}
    # the trail: per call, one invocation then exactly one result
    lines = [json.loads(line) for line in sink_path.read_text().splitlines()]
    for call in ("a", "b", "c"):
        phases = [line["phase"] for line in lines if line["toolCallId"] == call]
        assert phases == ["invocation", "result"]
        (result_line,) = [line for line in lines if line["toolCallId"] == call and line["phase"] == "result"]
        assert result_line["event"]["state"] == "cancelled"


@pytest.mark.parametrize("name", REMOVED_RUN_OPTIONS)
def test_removed_options_are_refused_with_a_code_not_ignored(name, tmp_path):
    with ModelServer("openai-chat", lambda view, number: Answer(text="x")) as server:
        result = _turn(server, _options(**{name: True}), tmp_path=tmp_path)
        assert server.seen == []
    assert result.error == "runtime-option-removed"
    assert name in result.error_detail


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"model": "sonnet"}, "fallback-invalid-model"),
        ({"model": None}, "run-invalid-options"),
        ({"max_steps": 0}, "run-invalid-options"),
        ({"tool_execution_mode": "wild"}, "run-invalid-options"),
        ({"messages": [{"role": "system", "content": "x"}]}, "run-invalid-options"),
        ({"model": "mistral:large"}, "runtime-backend-unavailable"),
        ({"persist": True}, "run-invalid-options"),
    ],
)
def test_bad_options_give_a_result_with_a_code(kwargs, code, tmp_path):
    with ModelServer("openai-chat", lambda view, number: Answer(text="x")) as server:
        result = _turn(server, _options(**kwargs), tmp_path=tmp_path)
    assert result.error == code
    assert result.stop_reason == "error"


def test_secrets_in_tool_output_never_reach_the_provider(tmp_path):
    secret = "AKIA" + "Z7QW3JQ5XK2MB4TD"

    def leak(arguments, context):
        return f"config:\naws_access_key_id = {secret}\nregion = eu-west-1"

    def brain(view, number):
        if number == 1:
            return Answer(calls=[("c1", "leak", "{}")])
        return Answer(text="ok")

    with ModelServer("openai-chat", brain) as server:
        result = _turn(server, _options(), tmp_path=tmp_path, tools=[HostTool(name="leak", function=leak)])
    assert result.error is None
    assert all(secret.encode() not in view.raw for view in server.seen)
    assert "eu-west-1" in server.seen[1].tool_results["c1"]  # the rest of the output arrives intact


def test_live_input_reaches_the_next_model_call_once_with_phases(tmp_path):
    phases = []
    live = LiveInput(on_phase=lambda event: phases.append((event.message_id, event.phase)))

    def nudge(arguments, context):
        assert live.push("also check the tests", id="m1")
        assert not live.push("a second body for m1", id="m1")  # the first occurrence owns the id
        live.push("anonymous note")
        return "nudged"

    def brain(view, number):
        if number == 1:
            return Answer(calls=[("c1", "nudge", "{}")])
        if number == 2:
            return Fail(503)  # the anonymous note must not be replayed on the retry
        return Answer(text="seen: " + " | ".join(view.user_texts))

    with ModelServer("openai-chat", brain) as server:
        result = _turn(
            server,
            _options(
                model=None, fallback_chain=[{"model": "openai:scripted", "attempts": 2}], live_input=live
            ),
            tmp_path=tmp_path,
            tools=[HostTool(name="nudge", function=nudge)],
        )
    assert result.error is None
    assert server.seen[1].user_texts == ["go", "also check the tests", "anonymous note"]
    assert server.seen[2].user_texts == ["go", "also check the tests"]
    assert result.text == "seen: go | also check the tests"
    assert ("m1", "accepted") in phases
    assert ("m1", "acknowledged") in phases
    assert (None, "uncertain") in phases
    assert live.phase("m1") == "acknowledged"
    # the turn's transcript keeps the identified input and drops the uncertain anonymous one
    assert [m.role for m in result.messages].count("user") == 2


def test_usage_from_each_answer_feeds_calibration(tmp_path):
    def brain(view, number):
        if number < 6:
            return Answer(calls=[(f"c{number}", "echo", json.dumps({"n": number}))])
        return Answer(text="done")

    async def main():
        runtime = create_runtime(
            workspace=tmp_path,
            tools=[ECHO],
            managed_tools=False,
            transports={"openai": transport_for("openai-chat", server.url)},
        )
        async with runtime:
            result = await runtime.run("system", _options())
            return result, runtime.calibration("openai:scripted-1")

    with ModelServer("openai-chat", brain) as server:
        result, calibration = anyio.run(main)
    assert result.error is None
    assert calibration is not None
    assert calibration.samples == len(result.steps) == 6


@pytest.mark.parametrize(("mode", "overlap"), [("sequential", 1), ("safe-parallel", 3)])
def test_sequential_mode_never_overlaps_calls_and_safe_parallel_overlaps_read_only_ones(
    mode, overlap, tmp_path
):
    inside = {"now": 0, "most": 0}

    async def look(arguments, context):
        inside["now"] += 1
        inside["most"] = max(inside["most"], inside["now"])
        await anyio.sleep(0.05)
        inside["now"] -= 1
        return "seen"

    tools = [
        HostTool(name="look", function=look, read_only=True, concurrency="parallel-safe"),
        HostTool(name="touch", function=lambda arguments, context: "touched"),
    ]

    def brain(view, number):
        if number == 1:
            calls = [("a", "look", "{}"), ("b", "look", "{}"), ("c", "look", "{}"), ("d", "touch", "{}")]
            return Answer(calls=calls)
        return Answer(text="ok")

    with ModelServer("openai-chat", brain) as server:
        result = _turn(server, _options(tool_execution_mode=mode), tmp_path=tmp_path, tools=tools)
    assert result.error is None
    assert inside["most"] == overlap
    # results come back in the order the model asked, whatever finished first
    assert [record.call_id for record in result.tool_records] == ["a", "b", "c", "d"]


def test_a_call_id_reused_from_an_earlier_turn_gets_a_fresh_one(tmp_path):
    session = tmp_path / "s.jsonl"

    def brain(view, number):
        if not view.tool_results or len(view.tool_results) < len(view.tool_calls) or number in (1, 3):
            return Answer(calls=[("call_1", "echo", json.dumps({"n": number}))])  # always the same id
        return Answer(text=f"turn done after {number}")

    with ModelServer("openai-chat", brain) as server:
        first = _turn(server, _options(session_path=session), tmp_path=tmp_path)
        second = _turn(server, _options(session_path=session), tmp_path=tmp_path)
    assert first.error is None
    assert second.error is None
    assert first.tool_records[0].call_id == "call_1"
    assert second.tool_records[0].call_id != "call_1"
    last = server.seen[-1]
    assert len(last.tool_calls) == len(set(last.tool_calls)) == 2
    assert set(last.tool_results) == set(last.tool_calls)


def test_cancelling_during_a_model_call_ends_the_turn_and_keeps_the_session_valid(tmp_path):
    session = tmp_path / "s.jsonl"
    cancel = anyio.Event()
    live = LiveInput()
    live.push("sent with the hanging call", id="n1")

    async def main():
        runtime = create_runtime(
            workspace=tmp_path,
            tools=[ECHO],
            managed_tools=False,
            transports={"openai": transport_for("openai-chat", server.url)},
        )

        async def cancel_soon():
            while not server.seen:
                await anyio.sleep(0.01)
            cancel.set()

        async with runtime, anyio.create_task_group() as group:
            group.start_soon(cancel_soon)
            with anyio.fail_after(10):
                return await runtime.run("s", _options(session_path=session, cancel=cancel, live_input=live))

    with ModelServer("openai-chat", lambda view, number: Hang(3)) as server:
        result = anyio.run(main)
    assert result.error == "run-cancelled"
    assert result.steps == ()
    assert live.phase("n1") == "uncertain"
    messages = build_pi_context(read_pi_session(session)).messages
    assert [m.role for m in messages] == ["user"]  # the input stays; nothing half-answered was written
