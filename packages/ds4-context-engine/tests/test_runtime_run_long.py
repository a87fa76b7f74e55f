"""A 200-step tool-using turn against a scripted server: every request inside the window, every call
answered."""

import json

import anyio
from _model_servers import Answer, ModelServer, transport_for

from ds4_context_engine.runtime import HostTool, RunOptions, create_runtime

STEPS = 200
WINDOW = 8000


def read_chunk(arguments, context):
    n = arguments["n"]
    return f"chunk {n}: " + ("lorem ipsum dolor sit amet " * 40)


def brain(view, number):
    if number <= STEPS:
        return Answer(text=f"step {number}", calls=[(f"c{number}", "read_chunk", json.dumps({"n": number}))])
    return Answer(text="all chunks read")


def test_a_two_hundred_step_turn_stays_inside_the_window_and_answers_every_call(tmp_path):
    session = tmp_path / "long.jsonl"

    async def main():
        runtime = create_runtime(
            workspace=tmp_path,
            tools=[HostTool(name="read_chunk", function=read_chunk, read_only=True)],
            managed_tools=False,
            transports={"openai": transport_for("openai-chat", server.url)},
        )
        async with runtime:
            return await runtime.run(
                "Read every chunk.",
                RunOptions(
                    model="openai:scripted",
                    messages=[{"role": "user", "content": "read all chunks"}],
                    max_steps=STEPS + 1,
                    context_window=WINDOW,
                    max_output_tokens=512,
                    session_path=session,
                ),
            )

    with ModelServer("openai-chat", brain) as server:
        result = anyio.run(main)
    assert result.error is None, result.error_detail
    assert result.text == "all chunks read"
    assert len(server.seen) == STEPS + 1
    for number, view in enumerate(server.seen, start=1):
        # what the provider received fits the window, bytes of JSON and all (4 bytes a token is generous)
        assert len(view.raw) / 4 <= WINDOW, number
        assert [call for call in view.tool_calls if call not in view.tool_results] == []
        for call, text in view.tool_results.items():
            assert text.startswith(f"chunk {call[1:]}:") or "[ds4" in text or "trimmed" in text.lower()
    # the last call still saw the newest result (its head at least: the planner may trim its middle) and
    # the user's request
    last = server.seen[-1]
    assert last.tool_results[f"c{STEPS}"].startswith(read_chunk({"n": STEPS}, None)[:200])
    assert "read all chunks" in last.raw.decode()
    assert all(step.planned_tokens <= step.hard_limit for step in result.steps)
    # the whole turn is in the session: 1 user + 200 x (assistant + tool) + the final answer
    assert len(result.session_entry_ids) == 1 + 2 * STEPS + 1
