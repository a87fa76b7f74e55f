"""The OpenAI Agents SDK integration in a real Runner run, with a scripted model that records its input."""

from __future__ import annotations

import functools
import sys

import anyio
import pytest

from ds4_context_core import MissingExtraError, ModelDescriptor
from ds4_context_core.integrations.openai_agents import model_input_filter, plan_agent_input

agents = pytest.importorskip("agents")
interface = pytest.importorskip("agents.models.interface")
responses_types = pytest.importorskip("openai.types.responses")

WINDOW = ModelDescriptor(provider="openai", id="gpt-x", context_window=32_000, max_tokens=4_096)


def _history(turns: int) -> list[dict]:
    items: list[dict] = [{"role": "user", "content": "Fix the failing tests."}]
    for turn in range(turns):
        items += [
            {
                "type": "function_call",
                "call_id": f"c{turn}a",
                "name": "read",
                "arguments": f'{{"path": "m{turn}.py"}}',
            },
            {
                "type": "function_call",
                "call_id": f"c{turn}b",
                "name": "run",
                "arguments": '{"cmd": "pytest"}',
            },
            {"type": "function_call_output", "call_id": f"c{turn}a", "output": "x = 1\n" * 400},
            {"type": "function_call_output", "call_id": f"c{turn}b", "output": "1 failed"},
        ]
    items.append({"role": "user", "content": "And the last one?"})
    return items


def _pairs(items) -> tuple[set, set]:
    calls = {
        item["call_id"] for item in items if isinstance(item, dict) and item.get("type") == "function_call"
    }
    outputs = {
        item["call_id"]
        for item in items
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    }
    return calls, outputs


def test_a_long_input_is_planned_with_the_callers_items_and_every_pair_whole():
    items = _history(60)
    sent, plan = plan_agent_input(items, model=WINDOW, instructions="Be brief.")
    assert plan.ok
    assert len(sent) < len(items)
    assert sent[-1] is items[-1]
    assert any(item is original for item in sent for original in items[:-1])
    calls, outputs = _pairs(sent)
    assert calls == outputs


class _ScriptedModel(interface.Model):
    """Answers "done" and records the input of every call: what the provider would have seen."""

    def __init__(self) -> None:
        self.inputs: list[list] = []

    async def get_response(self, system_instructions, input, *args, **kwargs):
        self.inputs.append(list(input) if isinstance(input, list) else [input])
        message = responses_types.ResponseOutputMessage(
            id="msg_1",
            type="message",
            role="assistant",
            status="completed",
            content=[responses_types.ResponseOutputText(type="output_text", text="done", annotations=[])],
        )
        return agents.ModelResponse(output=[message], usage=agents.Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError


def test_the_filter_plans_the_model_input_of_a_real_run():
    model = _ScriptedModel()
    agent = agents.Agent(name="coder", instructions="Be brief.", model=model)
    config = agents.RunConfig(call_model_input_filter=model_input_filter(model=WINDOW), tracing_disabled=True)
    result = anyio.run(functools.partial(agents.Runner.run, agent, _history(60), run_config=config))
    assert result.final_output == "done"
    seen = model.inputs[-1]
    assert len(seen) < len(_history(60))
    calls, outputs = _pairs(seen)
    assert calls == outputs
    assert seen[-1]["content"] == "And the last one?"


def test_without_the_sdk_the_extra_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "agents.run", None)
    with pytest.raises(MissingExtraError) as caught:
        model_input_filter(model=WINDOW)
    assert caught.value.extra == "openai-agents"
