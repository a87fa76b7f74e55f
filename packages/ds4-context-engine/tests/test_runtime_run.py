"""Agent turns end to end against scripted model servers on 127.0.0.1, in all three streaming shapes.

The servers record every request, so the tests assert what the provider saw: every tool call answered
(no orphan), the answers right, secrets redacted, each request inside the window.
"""

import json

import anyio
import pytest
from _model_servers import Answer, ModelServer, transport_for

from ds4_context_core import ModelDescriptor
from ds4_context_core.adapter import ToolDefinition
from ds4_context_engine.pi import build_pi_context, read_pi_session
from ds4_context_engine.providers import TextDelta, request_overhead_tokens
from ds4_context_engine.runtime import (
    HostTool,
    JsonlToolLifecycleStore,
    ModelStreamed,
    RunOptions,
    ToolFinished,
    ToolLifecycleSink,
    ToolStarted,
    create_runtime,
)

WIRES = ("openai-chat", "openai-responses", "anthropic")
PROVIDER = {"openai-chat": "openai", "openai-responses": "openai", "anthropic": "anthropic"}
CITIES = {"paris": "12 C and cloudy", "oslo": "-3 C and snowing"}


def weather(arguments, context):
    return CITIES.get(arguments.get("city", ""), "unknown city")


class Barrier:
    """Each call waits until ``parties`` calls are inside: only calls that overlap get through."""

    def __init__(self, parties):
        self.parties, self.inside, self.event = parties, 0, None

    async def wait(self):
        if self.event is None:
            self.event = anyio.Event()
        self.inside += 1
        if self.inside >= self.parties:
            self.event.set()
        with anyio.fail_after(5):
            await self.event.wait()


BARRIER = {"current": None}


async def overlapping_weather(arguments, context):
    barrier = BARRIER["current"]
    if barrier is not None:
        await barrier.wait()
    return weather(arguments, context)


WEATHER = HostTool(
    name="weather",
    function=overlapping_weather,
    description="Current weather in a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    read_only=True,
    concurrency="parallel-safe",
)


def _orphans(view):
    return [call for call in view.tool_calls if call not in view.tool_results]


def _run(coro_fn):
    return anyio.run(coro_fn)


def two_cities_then_answer(view, number):
    if not view.tool_results:
        return Answer(
            text="Checking both.",
            calls=[("call_a", "weather", '{"city": "paris"}'), ("call_b", "weather", '{"city": "oslo"}')],
        )
    return Answer(text=f"Paris: {view.tool_results['call_a']}; Oslo: {view.tool_results['call_b']}.")


@pytest.mark.parametrize("wire", WIRES)
def test_a_turn_streams_runs_parallel_tools_and_ends_with_the_answer(wire, tmp_path):
    events = []
    session = tmp_path / "session.jsonl"
    sink_file = tmp_path / "lifecycle.jsonl"
    with ModelServer(wire, two_cities_then_answer) as model:
        provider = PROVIDER[wire]

        async def main():
            runtime = create_runtime(
                workspace=tmp_path,
                tools=[WEATHER],
                managed_tools=False,
                transports={provider: transport_for(wire, model.url)},
                tool_lifecycle_sink=ToolLifecycleSink(JsonlToolLifecycleStore(sink_file)),
            )
            BARRIER["current"] = Barrier(2)
            async with runtime:
                return await runtime.run(
                    "You report the weather.",
                    RunOptions(
                        model=f"{provider}:scripted-1",
                        messages=[{"role": "user", "content": "Weather in Paris and Oslo?"}],
                        session_path=session,
                        on_event=events.append,
                    ),
                )

        result = _run(main)
    assert result.error is None, result.error_detail
    assert result.text == "Paris: 12 C and cloudy; Oslo: -3 C and snowing."
    # what the provider saw: the tools offered, then both results answered on the second call
    first, second = model.seen
    assert first.tool_names == ["weather"]
    assert first.user_texts == ["Weather in Paris and Oslo?"]
    assert _orphans(second) == []
    assert second.tool_results == {"call_a": "12 C and cloudy", "call_b": "-3 C and snowing"}
    # the two read-only calls overlapped: each waited for the other to start (a sequential run would fail)
    assert [record.state for record in result.tool_records] == ["success", "success"]
    # typed deltas streamed, tool events reported
    deltas = "".join(
        e.event.text for e in events if isinstance(e, ModelStreamed) and isinstance(e.event, TextDelta)
    )
    assert "Checking both." in deltas
    assert "Paris:" in deltas
    assert [e.name for e in events if isinstance(e, ToolStarted)] == ["weather", "weather"]
    assert {e.record.state for e in events if isinstance(e, ToolFinished)} == {"success"}
    # usage per step, from the provider
    assert len(result.steps) == 2
    assert all(step.usage is not None for step in result.steps)
    assert result.usage.input_tokens == sum(step.usage.input_tokens for step in result.steps)
    # the Pi session holds the whole turn and reads back as the same conversation
    context = build_pi_context(read_pi_session(session))
    roles = [message.role for message in context.messages]
    assert roles == ["user", "assistant", "tool", "tool", "assistant"]
    assert len(result.session_entry_ids) == 5
    # the lifecycle trail: an invocation, then exactly one result, per call
    lines = [json.loads(line) for line in sink_file.read_text().splitlines()]
    phases = [(line["toolCallId"], line["phase"]) for line in lines]
    assert sorted(phases) == sorted(
        [("call_a", "invocation"), ("call_a", "result"), ("call_b", "invocation"), ("call_b", "result")]
    )
    for call in ("call_a", "call_b"):
        assert phases.index((call, "invocation")) < phases.index((call, "result"))


def one_answer(view, number):
    return Answer(text="Done.")


@pytest.mark.parametrize("wire", WIRES)
def test_the_plan_budgets_the_system_prompt_and_tools_the_transport_really_sends(wire, tmp_path):
    long_prompt = "You are a careful coding agent. Read before you edit. " * 120
    provider = PROVIDER[wire]
    with ModelServer(wire, one_answer) as model:
        transport = transport_for(wire, model.url)

        async def main():
            runtime = create_runtime(
                workspace=tmp_path, tools=[WEATHER], managed_tools=False, transports={provider: transport}
            )
            async with runtime:
                return await runtime.run(
                    long_prompt,
                    RunOptions(
                        model=f"{provider}:scripted-1",
                        messages=[{"role": "user", "content": "hi"}],
                        context_window=32_000,
                        max_output_tokens=4_000,
                    ),
                )

        result = _run(main)
    assert result.error is None, result.error_detail
    (step,) = result.steps
    model_descriptor = ModelDescriptor(
        provider=provider, id="scripted-1", context_window=32_000, max_tokens=4_000
    )
    tool = ToolDefinition(name=WEATHER.name, description=WEATHER.description, parameters=WEATHER.parameters)
    measured = request_overhead_tokens(transport, model=model_descriptor, system=long_prompt, tools=[tool])
    # measured from the payload this transport builds (its wire shape of the prompt and the tool schema)
    assert measured > len(long_prompt) // 4
    assert step.fixed_tokens == measured
    assert step.planned_tokens <= step.hard_limit
